"""The Redis document store against a real redis-server: atomic commits, versions, leases."""

import json
import time
import uuid

import pytest
from redis.asyncio import Redis

from service.store.docs import BadPayload, DocStore, VersionConflict


@pytest.fixture
async def store(redis_url):
    r = Redis.from_url(redis_url)
    yield DocStore(r, f"t{uuid.uuid4().hex[:8]}", "s")
    await r.aclose()


def ev(v, **kw):
    return {"version": v, "kind": "env", "patch": [], **kw}


async def snapshot(store, doc):
    loaded = await store.load(doc)
    return loaded.version, loaded.state, await store.events(doc), await store.r.get(store.key(doc, "idem:k"))


async def test_commit_appends_events_with_version_ids(store):
    await store.create("d", {"n": 0}, {"tenant": "x"})
    v = await store.commit("d", 0, {"n": 2}, [ev(1), ev(2)], idem_key="k", idem_value='{"body": 1}')
    assert v == 2
    loaded = await store.load("d")
    assert loaded.state == {"n": 2} and loaded.version == 2 and loaded.meta["tenant"] == "x"
    assert [e["version"] for e in await store.events("d")] == [1, 2]
    assert [e["version"] for e in await store.events("d", after=1)] == [2]
    assert await store.get_idem("d", "k") == {"body": 1}


async def test_commit_from_a_stale_version_is_refused(store):
    await store.create("d", {"n": 0}, {})
    await store.commit("d", 0, {"n": 1}, [ev(1)])
    with pytest.raises(VersionConflict) as e:
        await store.commit("d", 0, {"n": 9}, [ev(1)])
    assert e.value.current == 1
    assert (await store.load("d")).state == {"n": 1}


async def test_a_commit_broken_midway_leaves_the_previous_state(store):
    """The second event of the step is corrupt: the script refuses before its first write."""
    await store.create("d", {"n": 0}, {})
    await store.commit("d", 0, {"n": 1}, [ev(1)])
    before = await snapshot(store, "d")
    with pytest.raises(BadPayload):
        await store.commit("d", 1, {"n": 3}, [ev(2), '{"version": 3, "kind": "env", broken'],
                           idem_key="k", idem_value='{"x": 1}')
    assert await snapshot(store, "d") == before
    with pytest.raises(BadPayload):
        await store.commit("d", 1, '{"n": ', [ev(2)])
    assert await snapshot(store, "d") == before


async def test_a_writer_that_lost_its_lease_cannot_commit(store):
    await store.create("d", {"n": 0}, {})
    status, _, (_, token) = await store.begin("d", 10_000)
    assert status == "ok" and (await store.begin("d", 10_000))[0] == "busy"
    await store.r.delete(store.key("d", "lock"))          # the lease expired ...
    _, _, (_, other) = await store.begin("d", 10_000)      # ... and another replica took it
    with pytest.raises(VersionConflict) as e:
        await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=token)
    assert e.value.why == "lease"
    assert await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=other) == 1
    await store.release("d", token)                        # releasing a lost lease does not free the new one
    assert await store.r.get(store.key("d", "lock")) == other.encode()


async def test_create_is_once_and_ttl_is_applied(store):
    assert await store.create("d", {"n": 0}, {}, ttl=100)
    assert not await store.create("d", {"n": 5}, {})
    await store.commit("d", 0, {"n": 1}, [ev(1)], ttl=50)
    for part in ("state", "meta", "events", "init"):
        assert 0 < await store.r.ttl(store.key("d", part)) <= 100
    assert json.loads(await store.r.get(store.key("d", "init"))) == {"n": 0}


async def test_evidence_is_buffered_once_and_consumed_by_the_commit(store):
    await store.create("b", {"entries": {}}, {})
    assert await store.add_evidence("b", "s1", {"won": True})
    assert not await store.add_evidence("b", "s1", {"won": False})
    assert await store.evidence("b") == {"s1": {"won": True}}
    await store.commit("b", 0, {"entries": {"e1": 1}}, [ev(1)], consume_evidence=["s1"])
    assert await store.evidence("b") == {}


async def test_all_keys_of_a_document_share_one_hash_tag(store):
    keys = store._keys("abc", "idem")
    tags = {k[k.index("{") + 1:k.index("}")] for k in keys}
    assert tags == {"s:abc"}


async def test_begin_reads_takes_the_lease_or_replays_in_one_call(store):
    assert (await store.begin("nope", 10_000))[0] == "gone"
    await store.create("d", {"n": 0}, {"tenant": "x"})
    status, meta, (loaded, token) = await store.begin("d", 10_000)
    assert status == "ok" and meta["tenant"] == "x" and loaded.state == {"n": 0}
    assert (await store.begin("d", 10_000))[0] == "busy"
    await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=token, idem_key="k",
                       idem_value='{"request_hash": "h", "body": {"v": 1}}', release=True)
    assert await store.r.get(store.key("d", "lock")) is None      # the commit gave the lease back
    status, meta, stored = await store.begin("d", 10_000, idem_key="k")
    assert status == "replay" and stored["body"] == {"v": 1} and meta["version"] == "1"
    assert await store.r.get(store.key("d", "lock")) is None      # a replay takes no lease


async def test_begin_can_peek_at_another_documents_version(store):
    other = DocStore(store.r, store.ns, "b")
    await store.create("d", {"n": 0}, {})
    status, _, (loaded, token) = await store.begin("d", 10_000, peek=other.meta_key("nope"))
    assert status == "ok" and loaded.peek == [None, None]
    await store.release("d", token)
    await other.create("bank", {"entries": {}}, {})
    await other.commit("bank", 0, {"entries": {"e": 1}}, [ev(1)])
    created = (await other.load("bank")).meta["created_at"]
    status, _, (loaded, token) = await store.begin("d", 10_000, peek=other.meta_key("bank"))
    assert loaded.peek == ["1", created] and loaded.state == {"n": 0}
    await store.release("d", token)
    status, _, (loaded, token) = await store.begin("d", 10_000)
    assert loaded.peek is None


async def test_begin_on_a_half_deleted_document_is_gone(store):
    await store.create("d", {"n": 0}, {})
    await store.r.delete(store.key("d", "state"))
    assert (await store.begin("d", 10_000))[0] == "gone"
    assert await store.r.get(store.key("d", "lock")) is None


async def test_begin_counts_a_rate_limit_first_in_the_same_call(store):
    counter = f"{store.ns}:ratelimit:key"
    await store.create("d", {"n": 0}, {})
    status, _, (loaded, token) = await store.begin("d", 10_000, count=(counter, 2, 30_000))
    assert status == "ok" and await store.r.get(counter) == b"1" and 0 < await store.r.pttl(counter) <= 30_000
    await store.release("d", token)
    assert (await store.begin("nope", 10_000, count=(counter, 2, 30_000)))[0] == "gone"     # counted too
    # over the limit: (count, ms left), checked before anything else; no lease, no read, no write
    other = DocStore(store.r, store.ns, "b")
    for n in (3, 4):
        status, meta, (count, ms_left) = await store.begin("d", 10_000, idem_key="k", peek=other.meta_key("x"),
                                                           count=(counter, 2, 30_000))
        assert (status, meta, count) == ("limited", {}, n) and 0 < ms_left <= 30_000
    assert (await store.begin("nope", 10_000, count=(counter, 2, 30_000)))[0] == "limited"
    assert await store.r.get(store.key("d", "lock")) is None and (await store.load("d")).version == 0
    # with a counter and a peek in one call
    status, _, (loaded, token) = await store.begin("d", 10_000, peek=other.meta_key("x"),
                                                   count=(f"{store.ns}:ratelimit:fresh", 2, 30_000))
    assert status == "ok" and loaded.peek == [None, None] and loaded.state == {"n": 0}


async def test_the_script_parses_raw_text_but_not_what_the_store_serialized(store):
    """Raw text is parsed (and refused when broken) before any write; dicts and JSONText are valid by construction
    and are stored as given, unparsed."""
    from service.store.docs import JSONText

    await store.create("d", {"n": 0}, {})
    with pytest.raises(BadPayload):
        await store.commit("d", 0, '{"n": ', [ev(1)])
    # a JSONText is the caller's promise that json.dumps made it: the store keeps it as is
    assert await store.commit("d", 0, JSONText('{"n":1}'), [ev(1)]) == 1
    assert (await store.load("d")).state == {"n": 1}
    with pytest.raises(BadPayload):              # a raw event after a trusted state is still checked
        await store.commit("d", 1, JSONText('{"n":2}'), [ev(2), '{"broken'])
    assert (await store.load("d")).version == 1


async def test_a_lease_is_given_back_when_the_block_ends(store):
    await store.create("d", {"n": 0}, {"tenant": "x"})
    async with store.lease("d", 10_000) as held:
        assert held.status == "ok" and held.loaded.state == {"n": 0} and held.meta["tenant"] == "x"
        async with store.lease("d", 10_000) as other:
            assert other.status == "busy" and other.meta["version"] == "0" and other.token is None
        assert await store.r.get(store.key("d", "lock")) == held.token.encode()     # "busy" took nothing
    assert await store.r.get(store.key("d", "lock")) is None
    with pytest.raises(KeyError):
        async with store.lease("d", 10_000) as held:
            raise KeyError("refused in the block")
    assert await store.r.get(store.key("d", "lock")) is None                          # given back on an error too
    async with store.lease("d", 10_000) as held:
        await store.commit("d", 0, {"n": 1}, [ev(1)], lease_token=held.token, release=True)
        held.released()
    assert held.token is None and (await store.load("d")).version == 1
    async with store.lease("nope", 10_000) as held:
        assert held.status == "gone" and held.meta == {} and held.loaded is None


async def test_live_index_and_ping(redis_url):
    r = Redis.from_url(redis_url)
    docs = DocStore(r, f"t{uuid.uuid4().hex[:8]}", "s", live_index="active")
    try:
        assert await docs.ping() and docs.live_key == f"{docs.ns}:active"
        now = time.time()
        await docs.set_live("a", now + 100)
        await docs.set_live("b", now + 100)
        await docs.set_live("old", now - 1)                  # past its time: not counted, and dropped
        assert await docs.count_live() == 2 and await r.zscore(docs.live_key, "old") is None
        await docs.drop_live("a")
        assert await docs.count_live() == 1
    finally:
        await r.delete(docs.live_key)
        await r.aclose()
