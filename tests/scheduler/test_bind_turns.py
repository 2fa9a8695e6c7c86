"""The scheduler's in-memory per-node serialisation of binds."""

import asyncio

import pytest

from pyhami.scheduler.bind_turns import BindTurns, NodeTurnTimeoutError


async def test_bind_turns_serialise_per_node_only() -> None:
    turns = BindTurns()
    order: list[str] = []

    async def work(node: str, tag: str, pause: float) -> None:
        async with turns.hold(node):
            order.append(f"{tag}+")
            await asyncio.sleep(pause)
            order.append(f"{tag}-")

    await asyncio.gather(work("a", "a1", 0.02), work("a", "a2", 0), work("b", "b1", 0))
    assert order.index("a1-") < order.index("a2+")
    assert order.index("b1-") < order.index("a1-")
    turns.forget("a")


async def test_a_turn_that_does_not_come_in_time_is_a_timeout_and_frees_nothing() -> None:
    turns = BindTurns()
    async with turns.hold("a"):
        with pytest.raises(NodeTurnTimeoutError, match=r"node a: no turn within 0\.0s"):
            async with turns.hold("a", within=0.01):
                pass
    async with turns.hold("a", within=0.01):  # free again once the holder is done
        pass
