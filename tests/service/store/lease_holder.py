"""A writer in its own process, for tests/service/store/test_lease_failover.py: takes a document's lease (with its
heartbeat), prints `held <token>`, then commits when a line arrives on stdin and prints `committed <version>` or
`refused <why> lost=<bool>`. The test SIGKILLs it (a replica that dies) or SIGSTOPs it (a replica that stalls).
With `presence` last, it writes with this process's Presence (service/store/presence.py), as the service does.

    python tests/service/store/lease_holder.py REDIS_URL NAMESPACE DOC LEASE_MS HEARTBEAT_MS [presence]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from redis.asyncio import Redis

from service.store.docs import DocStore, VersionConflict
from service.store.presence import Presence


async def main(url: str, ns: str, doc: str, lease_ms: int, heartbeat_ms: int, presence: bool) -> None:
    r = Redis.from_url(url)
    me = Presence(r, ns) if presence else None
    if me is not None:
        await me.start()
        assert me.subscribed
    store = DocStore(r, ns, "s", presence=me)
    async with store.lease(doc, lease_ms, heartbeat_ms=heartbeat_ms) as held:
        assert held.status == "ok", held.status
        print("held", held.token, flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        v0 = held.loaded.version
        try:
            v = await store.commit(doc, v0, {"by": "child"}, [{"version": v0 + 1, "kind": "env", "patch": []}],
                                   lease_token=held.token, release=True)
            held.released()
            print("committed", v, flush=True)
        except VersionConflict as e:
            print("refused", e.why, f"lost={held.lost}", flush=True)
    await r.aclose()


if __name__ == "__main__":
    url, ns, doc, lease_ms, hb = sys.argv[1:6]
    asyncio.run(main(url, ns, doc, int(lease_ms), int(hb), sys.argv[6:7] == ["presence"]))
