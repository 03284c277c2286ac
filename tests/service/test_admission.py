"""service.admission: at most `limit` steps run, the rest wait in line, urgent ones first; nothing leaks."""

import asyncio

import pytest

from service.admission import Admission, AdmissionTimeout, RecentlyBusy


async def _hold(adm: Admission, name: str, order: list, release: asyncio.Event, urgent: bool = False):
    async with adm.slot(urgent):
        order.append(name)
        await release.wait()


async def test_a_full_replica_admits_urgent_waiters_before_earlier_normal_ones():
    adm, order, release = Admission(2), [], asyncio.Event()
    running = [asyncio.create_task(_hold(adm, f"r{i}", order, release)) for i in range(2)]
    await asyncio.sleep(0)
    assert adm.running == 2 and order == ["r0", "r1"]
    late = [asyncio.create_task(_hold(adm, "n1", order, release)),
            asyncio.create_task(_hold(adm, "n2", order, release)),
            asyncio.create_task(_hold(adm, "u1", order, release, urgent=True))]
    await asyncio.sleep(0)
    assert adm.waiting == 3 and adm.running == 2
    release.set()
    await asyncio.gather(*running, *late)
    assert order[2] == "u1" and order[3:] == ["n1", "n2"]
    assert adm.running == 0 and adm.waiting == 0


async def test_a_waiter_that_times_out_or_is_cancelled_gives_back_nothing_it_did_not_take():
    adm, order, release = Admission(1), [], asyncio.Event()
    holder = asyncio.create_task(_hold(adm, "h", order, release))
    await asyncio.sleep(0)
    with pytest.raises(AdmissionTimeout):
        async with adm.slot(timeout_s=0.01):
            pass
    cancelled = asyncio.create_task(_hold(adm, "c", order, release))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert adm.waiting == 0 and adm.running == 1
    release.set()
    await holder
    assert adm.running == 0
    async with adm.slot():           # the slot is free again, not lost to the waiters that gave up
        assert adm.running == 1
    assert order == ["h"]


async def test_limit_zero_admits_everything():
    adm, order, release = Admission(0), [], asyncio.Event()
    tasks = [asyncio.create_task(_hold(adm, str(i), order, release)) for i in range(50)]
    await asyncio.sleep(0)
    assert len(order) == 50 and adm.waiting == 0
    release.set()
    await asyncio.gather(*tasks)


async def test_recently_busy_forgets_after_one_use_after_its_ttl_and_beyond_its_size():
    busy = RecentlyBusy(ttl_s=60, size=2)
    busy.mark("a")
    assert busy.pop("a") and not busy.pop("a")       # one urgent step per refusal
    busy.mark("a"), busy.mark("b"), busy.mark("c")
    assert not busy.pop("a") and busy.pop("b") and busy.pop("c")
    stale = RecentlyBusy(ttl_s=0.001)
    stale.mark("x")
    await asyncio.sleep(0.01)
    assert not stale.pop("x")
