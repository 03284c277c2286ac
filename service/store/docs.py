"""Versioned JSON documents in Redis: the ONE write path of the service.

A document (a session or an Experience bank) is a family of keys sharing one hash
tag, so every key of a document lives in one Redis Cluster slot and one Lua script
can write them all atomically::

    {ns}:{<tag>}:state     current state (JSON string)
    {ns}:{<tag>}:init      state at version 0 (JSON string), for time travel
    {ns}:{<tag>}:meta      hash: version, created_at, updated_at, and caller fields
    {ns}:{<tag>}:events    stream, one entry per committed event, entry id "<version>-1"
    {ns}:{<tag>}:lock      single-writer lease (token), taken for the duration of a step, renewed while it runs
    {ns}:{<tag>}:idem:<k>  stored response for an Idempotency-Key
    {ns}:{<tag>}:evidence  hash of pending evidence (banks only)

`version` counts committed events: the state at version k is `init` with the patches of
events 1..k applied. A commit names the version it was computed from; the script
refuses it if the version moved or the writer lost its lease, and it validates every
payload before the first write (Redis does not roll back a script that fails midway),
so a commit lands whole or not at all. "Every payload" means every one that could be invalid: the script parses
the payloads a caller passed as raw text (`str`), and skips those serialized by code (a dict, which the store
writes with service/store/codec.py; `bytes` from `codec.dumps`; a `JSONText` made with `json.dumps`), which are
valid by construction (what that saves: docs/benchmarks.md). JSON is written compact, UTF-8 (codec.py).

Every write goes through a lease: `async with store.lease(doc_id, lease_ms) as held:` takes the single-writer
lease with the current state in one call, the block checks `held.status`, commits, and the lease goes back on the
way out. The lease is short (a few seconds) and a heartbeat renews it while the block runs, so a writer that dies
frees its document within `lease_ms`. The commit script is the fence: it writes only if the lock still holds the
writer's token, so a writer that outlived its lease (stalled past it, or its renewal found another token) never
commits, whatever it believes. A store can also keep an index of its live documents (`live_index`: a sorted set scored by expiry time,
e.g. the active sessions), and answers `ping` for readiness checks; nothing outside service/store/ touches the
Redis client itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Self

from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from service.rate_limit import COUNT_LUA
from service.store import codec
from service.store.presence import Presence

log = logging.getLogger("evoharness")
_COMMIT = r"""
local state_k, meta_k, events_k, lock_k, idem_k, evid_k, init_k = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local expected = tonumber(ARGV[1])
local token = ARGV[2]
local new_state = ARGV[3]
local ttl = tonumber(ARGV[4])
local idem_val = ARGV[5]
local idem_ttl = tonumber(ARGV[6])
local n_events = tonumber(ARGV[7])
local n_consume = tonumber(ARGV[8])
local n_meta = tonumber(ARGV[9])
local now = ARGV[10]
local cur = redis.call('HGET', meta_k, 'version')
if not cur then return {'gone', 0} end
cur = tonumber(cur)
if cur ~= expected then return {'conflict', cur} end
if token ~= '' and redis.call('GET', lock_k) ~= token then return {'lease', cur} end
-- which payloads to parse: '1' = raw text from the caller, '0' = serialized by the store (state, then events)
local check = ARGV[12 + n_events + n_consume + n_meta * 2]
local i = 11
local events = {}
for j = 1, n_events do
  local e = ARGV[i]; i = i + 1
  if string.byte(check, j + 1) == 49 and not pcall(cjson.decode, e) then return {'bad_event', cur} end
  events[j] = e
end
if string.byte(check, 1) == 49 and not pcall(cjson.decode, new_state) then return {'bad_state', cur} end
local consume = {}
for j = 1, n_consume do consume[j] = ARGV[i]; i = i + 1 end
local meta = {'version', tostring(cur + n_events), 'updated_at', now}
for j = 1, n_meta * 2 do meta[#meta + 1] = ARGV[i]; i = i + 1 end
for j = 1, n_events do
  redis.call('XADD', events_k, tostring(cur + j) .. '-1', 'e', events[j])
end
redis.call('SET', state_k, new_state)
redis.call('HSET', meta_k, unpack(meta))
if idem_val ~= '' then redis.call('SET', idem_k, idem_val, 'EX', idem_ttl) end
if n_consume > 0 then redis.call('HDEL', evid_k, unpack(consume)) end
if token ~= '' and ARGV[11 + n_events + n_consume + n_meta * 2] == '1' then redis.call('DEL', lock_k) end
if ttl > 0 then
  for _, k in ipairs({state_k, meta_k, events_k, init_k}) do redis.call('EXPIRE', k, ttl) end
end
return {'ok', cur + n_events}
"""

_CREATE = r"""
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], ARGV[1])
local meta = {'version', '0', 'created_at', ARGV[3], 'updated_at', ARGV[3]}
local n = tonumber(ARGV[4])
for j = 1, n * 2 do meta[#meta + 1] = ARGV[4 + j] end
redis.call('HSET', KEYS[2], unpack(meta))
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  for _, k in ipairs(KEYS) do redis.call('EXPIRE', k, ttl) end
end
return 1
"""

_LOAD = r"""
local st = redis.call('GET', KEYS[1])
if not st then return false end
return {st, redis.call('HGETALL', KEYS[2])}
"""

_BEGIN = r"""
-- KEYS: state, meta, lock, idem[, peek][, counter]
-- ARGV: token, lease_ms, check_idem (0/1), peek (0/1), counter limit, counter window ms ('' = no counter),
--       presence channel prefix ('' = no presence), this writer's presence id
if ARGV[6] ~= '' then
  local rk, window = KEYS[#KEYS], tonumber(ARGV[6])
""" + COUNT_LUA + r"""
  if rn > tonumber(ARGV[5]) then return {'limited', rn, rttl} end
end
local meta = redis.call('HGETALL', KEYS[2])
if #meta == 0 then return {'gone'} end
if ARGV[3] == '1' then
  local stored = redis.call('GET', KEYS[4])
  if stored then return {'replay', stored, meta} end
end
local ok = 'ok'
if not redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  -- held: by a process that is gone (its presence channel has no subscriber), take it over (service/store/presence.py)
  local holder = ARGV[7] ~= '' and string.match(redis.call('GET', KEYS[3]), '^(%x+)%.')
  if holder and holder ~= ARGV[8] and redis.call('PUBSUB', 'NUMSUB', ARGV[7] .. holder)[2] == 0 then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', tonumber(ARGV[2]))
    ok = 'took'
  else
    return {'busy', meta, redis.call('PTTL', KEYS[3])}
  end
end
if ARGV[4] == '1' then return {ok, redis.call('GET', KEYS[1]), meta, redis.call('HMGET', KEYS[5], 'version', 'created_at')} end
return {ok, redis.call('GET', KEYS[1]), meta}
"""

_RELEASE = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# the heartbeat: extend the lease only while it still holds this writer's token (an expired or taken lease stays so)
_RENEW = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class DocGone(LookupError):
    """The document does not exist (never created, deleted, or expired)."""


class VersionConflict(RuntimeError):
    def __init__(self, current: int, why: str = "conflict"):
        super().__init__(f"version conflict ({why}); current version is {current}")
        self.current = current
        self.why = why


class BadPayload(ValueError):
    """The commit payload was rejected by the store before any write."""


@dataclass
class Loaded:
    state: dict
    version: int
    meta: dict
    peek: list | None = None  # begin(peek=...): [version, created_at] of another document, read atomically with it
    took_over: bool = False   # begin: the lease was taken from a writer that is gone (see DocStore's `presence`)


def _now() -> str:
    return f"{time.time():.3f}"


class DocStore:
    """One kind of document ("s" for sessions, "b" for banks) under a namespace.

    `live_index`: the name of a sorted set `{namespace}:{live_index}` of this store's live documents, each scored by
    the time it expires (`set_live`, `drop_live`, `count_live`); None: no index.

    `presence`: this process's `Presence` (service/store/presence.py): its lease tokens carry the process's id, and
    a lease held by a process that died is taken over at once (`begin` answers "ok" with `took_over`); None: leases
    are taken only once they lapse. Not on Redis Cluster."""

    def __init__(self, redis: Redis, namespace: str, kind: str, live_index: str | None = None,
                 presence: Presence | None = None):
        self.r = redis
        self.presence = presence
        self.ns = namespace
        self.kind = kind
        self.live_key = f"{namespace}:{live_index}" if live_index is not None else None
        self._commit = redis.register_script(_COMMIT)
        self._create = redis.register_script(_CREATE)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)
        self._load = redis.register_script(_LOAD)
        self._begin = redis.register_script(_BEGIN)
        # one script may touch keys of two documents only on a single Redis server, not on a Redis Cluster
        self.can_peek = not _is_cluster(redis)

    async def _run(self, script, keys: list, args: list = ()):
        """EVALSHA of a registered script, loading it first if the server does not know it (after a restart or a
        SCRIPT FLUSH): what redis-py's Script object does, without its per-call import, type check and copies."""
        try:
            return await self.r.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            script.sha = await self.r.script_load(script.script)
            return await self.r.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def key(self, doc_id: str, part: str) -> str:
        return f"{self.ns}:{{{self.kind}:{doc_id}}}:{part}"

    def _keys(self, doc_id: str, idem: str | None) -> list[str]:
        k = lambda p: self.key(doc_id, p)  # noqa: E731
        return [k("state"), k("meta"), k("events"), k("lock"), k(f"idem:{idem or '_'}"), k("evidence"), k("init")]

    async def create(self, doc_id: str, state: dict, meta: dict[str, str], ttl: int = 0) -> bool:
        flat = [x for kv in meta.items() for x in kv]
        keys = [self.key(doc_id, "state"), self.key(doc_id, "meta"), self.key(doc_id, "init")]
        return bool(await self._run(self._create, keys=keys, args=[codec.dumps(state), ttl, _now(), len(meta), *flat]))

    async def load(self, doc_id: str) -> Loaded:
        res = await self._run(self._load, keys=[self.key(doc_id, "state"), self.key(doc_id, "meta")])
        if not res or not res[1]:
            raise DocGone(doc_id)
        raw, flat = res
        meta = {_s(flat[i]): _s(flat[i + 1]) for i in range(0, len(flat), 2)}
        return Loaded(codec.loads(raw), int(meta["version"]), meta)

    async def exists(self, doc_id: str) -> bool:
        return bool(await self.r.exists(self.key(doc_id, "meta")))

    async def meta(self, doc_id: str) -> dict:
        meta = await self.r.hgetall(self.key(doc_id, "meta"))
        if not meta:
            raise DocGone(doc_id)
        return {_s(k): _s(v) for k, v in meta.items()}

    async def commit(
        self,
        doc_id: str,
        expected_version: int,
        new_state: dict,
        events: list[dict],
        *,
        lease_token: str | None = None,
        idem_key: str | None = None,
        idem_value: str | None = None,
        idem_ttl: int = 86400,
        consume_evidence: list[str] = (),
        meta: dict[str, str] | None = None,
        ttl: int = 0,
        release: bool = False,
    ) -> int:
        """Append `events` and set the new state atomically; returns the new version.

        With `release`, the lease `lease_token` is given back in the same script."""
        meta = meta or {}
        args = [
            expected_version, lease_token or "", _json_or_raw(new_state), ttl,
            idem_value or "", idem_ttl, len(events), len(consume_evidence), len(meta), _now(),
            *[_json_or_raw(e) for e in events], *consume_evidence, *[x for kv in meta.items() for x in kv],
            "1" if release else "0", "".join("1" if _raw(x) else "0" for x in (new_state, *events)),
        ]
        status, version = await self._run(self._commit, keys=self._keys(doc_id, idem_key), args=args)
        status = _s(status)
        if status == "ok":
            return int(version)
        if status == "gone":
            raise DocGone(doc_id)
        if status in ("conflict", "lease"):
            raise VersionConflict(int(version), status)
        raise BadPayload(status)

    async def begin(self, doc_id: str, lease_ms: int, idem_key: str | None = None,
                    peek: str | None = None, count: tuple[str, int, int] | None = None) -> tuple[str, dict, object]:
        """One round trip to start a write: ("gone", {}, None) | ("replay", meta, stored idempotent record)
        | ("busy", meta, ms until the other writer's lease lapses unless renewed) | ("ok", meta, (Loaded, lease token))
        | ("limited", {}, (count, ms left)).

        `peek`: the meta key of another document (see `meta_key`, e.g. the session's bank) whose version and
        created_at come back in `Loaded.peek` from the same call. Only where `can_peek` (one Redis server: a
        Redis Cluster refuses keys of two slots in one script); elsewhere it is ignored and `Loaded.peek` is None.

        `count`: (counter key, limit, window ms) of a rate limit (service/rate_limit.py), counted first in the same
        script; over the limit the answer is "limited" and nothing else is read or written (no lease). Only where
        `can_peek`, for the same reason; elsewhere it is an error (count with RateLimiter.hit first)."""
        presence = self.presence
        token = presence.token() if presence is not None else os.urandom(16).hex()  # 128 random bits
        keys = [self.key(doc_id, "state"), self.key(doc_id, "meta"), self.key(doc_id, "lock"),
                self.key(doc_id, f"idem:{idem_key or '_'}")]
        peeking = peek is not None and self.can_peek
        if peeking:
            keys.append(peek)
        args = [token, lease_ms, "1" if idem_key else "0", "1" if peeking else "0", "", "",
                presence.prefix if presence is not None else "", presence.id if presence is not None else ""]
        if count is not None:
            if not self.can_peek:
                raise ValueError("a rate-limit counter is in another slot: count it separately on Redis Cluster")
            keys.append(count[0])
            args[4:6] = count[1], count[2]
        res = await self._run(self._begin, keys=keys, args=args)
        status = _s(res[0])
        took_over = status == "took"
        if took_over:
            status = "ok"
            log.info("lease %s: taken over from a writer that is gone", doc_id)
        if status == "limited":
            return "limited", {}, (int(res[1]), int(res[2]))
        if status == "gone":
            return "gone", {}, None
        if status == "ok" and (len(res) < 3 or res[1] is None):
            # meta without state: a half-deleted document (Lua cuts its reply at the nil state)
            await self.release(doc_id, token)
            return "gone", {}, None
        flat = res[2] if status in ("ok", "replay") else res[1]
        meta = {_s(flat[i]): _s(flat[i + 1]) for i in range(0, len(flat), 2)}
        if status == "replay":
            return "replay", meta, json.loads(res[1])
        if status == "busy":
            return "busy", meta, max(int(res[2]), 0) if len(res) > 2 else 0
        peeked = [None if x is None else _s(x) for x in res[3]] if len(res) > 3 else None
        return "ok", meta, (Loaded(codec.loads(res[1]), int(meta["version"]), meta, peeked, took_over), token)

    def lease(self, doc_id: str, lease_ms: int, idem_key: str | None = None, peek: str | None = None,
              count: tuple[str, int, int] | None = None, heartbeat_ms: int | None = None) -> Lease:
        """`async with store.lease(...) as held:` the one way to write a document (see `Lease`); the arguments are
        `begin`'s, and `heartbeat_ms` how often the held lease is renewed (None: every lease_ms / 3)."""
        return Lease(self, doc_id, lease_ms, idem_key, peek, count,
                     heartbeat_ms if heartbeat_ms is not None else max(lease_ms // 3, 1))

    def meta_key(self, doc_id: str) -> str:
        return self.key(doc_id, "meta")

    async def release(self, doc_id: str, token: str) -> None:
        await self._run(self._release, keys=[self.key(doc_id, "lock")], args=[token])

    async def renew(self, doc_id: str, token: str, lease_ms: int) -> bool:
        """Extend the lease `token` to `lease_ms` from now; False if it is no longer held by that token (it lapsed,
        or another writer took it): then it stays lost, and a commit with that token is refused."""
        return bool(await self._run(self._renew, keys=[self.key(doc_id, "lock")], args=[token, lease_ms]))

    async def get_idem(self, doc_id: str, idem_key: str) -> dict | None:
        raw = await self.r.get(self.key(doc_id, f"idem:{idem_key}"))
        return None if raw is None else json.loads(raw)

    async def events(self, doc_id: str, after: int = 0, limit: int = 100, upto: int | None = None) -> list[dict]:
        end = f"{upto}-1" if upto is not None else "+"
        rows = await self.r.xrange(self.key(doc_id, "events"), min=f"{after + 1}-0", max=end, count=limit)
        return [codec.loads(fields[b"e"] if b"e" in fields else fields["e"]) for _id, fields in rows]

    async def init_state(self, doc_id: str) -> dict:
        raw = await self.r.get(self.key(doc_id, "init"))
        if raw is None:
            raise DocGone(doc_id)
        return json.loads(raw)

    async def add_evidence(self, doc_id: str, field: str, value: dict) -> bool:
        """Buffer evidence once per field (idempotent: a second add of the same field is ignored)."""
        return bool(await self.r.hsetnx(self.key(doc_id, "evidence"), field, json.dumps(value)))

    async def evidence(self, doc_id: str) -> dict[str, dict]:
        raw = await self.r.hgetall(self.key(doc_id, "evidence"))
        return {_s(k): json.loads(v) for k, v in raw.items()}

    async def delete(self, doc_id: str) -> bool:
        base = [self.key(doc_id, p) for p in ("state", "meta", "events", "lock", "init", "evidence")]
        idem = [k async for k in self.r.scan_iter(match=self.key(doc_id, "idem:*"), count=500)]
        return bool(await self.r.delete(*base, *idem))

    # ---- the index of live documents (live_index) and readiness
    async def set_live(self, doc_id: str, until: float) -> None:
        """List the document as live until `until` (epoch seconds)."""
        await self.r.zadd(self.live_key, {doc_id: until})

    async def drop_live(self, doc_id: str) -> None:
        await self.r.zrem(self.live_key, doc_id)

    async def count_live(self) -> int:
        """Live documents now (entries past their time are dropped first)."""
        await self.r.zremrangebyscore(self.live_key, "-inf", time.time())
        return int(await self.r.zcard(self.live_key))

    async def ping(self) -> bool:
        """Whether Redis answers (raises what the client raises when it does not)."""
        return bool(await self.r.ping())


class Lease:
    """A document's single-writer lease for one read-modify-commit::

        async with store.lease(doc_id, lease_ms) as held:
            if held.status != "ok": ...                  # raise: "gone", "busy" (or "replay", "limited"; see begin)
            ... await store.commit(doc_id, held.loaded.version, new_state, events, lease_token=held.token)

    Entering takes the lease with the document's current state in one Redis call (`DocStore.begin`); leaving gives
    it back, shielded from cancellation, if it was taken and a commit has not already given it back (a commit with
    `release=True`: then call `held.released()` after it). After entering:

    * `status`: "ok" | "gone" | "busy" | "replay" | "limited" (as `begin`);
    * `meta`: the document's meta ({} when gone or limited);
    * "ok": `loaded` (state, version, meta, peek) and `token` (the lease); "replay": `stored` (the idempotent
      record); "limited": `limited` (count, ms left); "busy": `busy_ms` (ms until the holder's lease lapses unless
      its heartbeat renews it).

    The heartbeat: while the block runs, every `heartbeat_ms` the lease is extended to `lease_ms` from then
    (`DocStore.renew`, only while it still holds this token); it stops when the block ends or the commit gives the
    lease back. A renewal that finds the lease gone sets `lost` and stops: the lease is not taken again, and the
    commit script refuses this token (VersionConflict "lease"). A renewal that fails (Redis unreachable, or slower
    than `heartbeat_ms`) is tried again at the next beat; if the lease lapses meanwhile, the same fence holds. So a
    writer whose heartbeat stopped (its process stalled or died) loses the document `lease_ms` after the last
    renewal at the latest, and never commits after that.
    """

    __slots__ = ("_beat", "_begin", "_doc_id", "_every", "_renewing", "_store", "busy_ms", "limited", "loaded",
                 "lost", "meta", "status", "stored", "token")

    def __init__(self, store: DocStore, doc_id: str, lease_ms: int, idem_key: str | None, peek: str | None,
                 count: tuple[str, int, int] | None, heartbeat_ms: int):
        self._store, self._doc_id, self._begin = store, doc_id, (lease_ms, idem_key, peek, count)
        self._every = heartbeat_ms / 1000
        self._beat = self._renewing = None
        self.status, self.meta, self.lost = "", {}, False
        self.loaded = self.token = self.stored = self.limited = self.busy_ms = None

    async def __aenter__(self) -> Self:
        lease_ms, idem_key, peek, count = self._begin
        self.status, self.meta, got = await self._store.begin(self._doc_id, lease_ms, idem_key, peek=peek,
                                                              count=count)
        if self.status == "ok":
            self.loaded, self.token = got
            self._beat = asyncio.get_running_loop().call_later(self._every, self._heartbeat)
        elif self.status == "replay":
            self.stored = got
        elif self.status == "limited":
            self.limited = got
        elif self.status == "busy":
            self.busy_ms = got
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop()
        if self.token is not None:
            token, self.token = self.token, None
            await asyncio.shield(self._store.release(self._doc_id, token))

    def released(self) -> None:
        """A commit with `release=True` gave the lease back: leaving the block does not release it again."""
        self._stop()
        self.token = None

    # ---- the heartbeat: a timer, then one renewal at a time; nothing runs between steps
    def _stop(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        # a renewal in flight is left to finish: after the release it finds another token or none and changes nothing

    def _heartbeat(self) -> None:
        self._beat = None
        if self.token is not None:
            self._renewing = asyncio.ensure_future(self._renew(self.token))

    async def _renew(self, token: str) -> None:
        lease_ms = self._begin[0]
        try:
            async with asyncio.timeout(self._every):
                kept = await self._store.renew(self._doc_id, token, lease_ms)
        except (RedisError, OSError, TimeoutError) as e:
            if self.token != token:
                return
            log.warning("lease %s: renewal failed (%s); retrying at the next beat", self._doc_id, e or type(e).__name__)
            kept = True
        if self.token != token:
            return                      # given back while this renewal was on its way: nothing was lost
        if not kept:
            # lapsed or taken by another writer; or, rarely, given back by this writer's own commit an instant before
            # the answer came (the commit's refusal, not this, is what callers report)
            self.lost = True
            log.debug("lease %s: renewal found it gone; a commit with this token will be refused", self._doc_id)
        else:
            self._beat = asyncio.get_running_loop().call_later(self._every, self._heartbeat)


def _is_cluster(redis) -> bool:
    try:
        from redis.asyncio.cluster import RedisCluster
    except ImportError:  # pragma: no cover
        return False
    return isinstance(redis, RedisCluster)


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else x


class JSONText(str):
    """Text the caller made with `json.dumps`: valid JSON by construction, so the commit script does not parse it
    again (a plain `str` is raw text and is parsed before anything is written; `bytes` are taken to come from
    `codec.dumps`, like a dict the store serializes itself)."""


def _raw(x) -> bool:
    return isinstance(x, str) and not isinstance(x, JSONText)


def _json_or_raw(x) -> str | bytes:
    return x if isinstance(x, (str, bytes)) else codec.dumps(x)
