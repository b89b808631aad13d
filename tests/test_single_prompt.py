"""The single-prompt context manager: the head survives, sections go in whole by priority
within half the window, and the result lists its sources (layer: tests; pure functions)."""

from __future__ import annotations

from ator.agent.single_prompt import PRIORITY, Section, pack
from ator.usage import estimate_tokens


def test_ten_sections_at_a_small_window_keep_the_head_and_skip_the_lowest_whole() -> None:
    head = [("core", "You are an assistant."), ("persona", "Terse."),
            ("thread", "Answer in French.")]
    kinds = list(PRIORITY)  # facts, recent, earlier, knowledge, memory, background
    sections = [Section(kinds[i % len(kinds)], f"section {i}: " + "x" * 400, f"src-{i}")
                for i in range(10)]
    window = 2 * 600  # half of it is the budget: the head, the task and a few sections
    packed = pack(head, sections, window // 2, task="What now?")
    assert packed.head == head  # always kept
    assert packed.used_tokens <= window // 2
    order = sorted(sections, key=lambda s: s.rank)
    kept = packed.included
    assert kept == order[:len(kept)] and 0 < len(kept) < 10  # by priority, a prefix here
    skipped = [s for s, _ in packed.skipped]
    assert skipped == order[len(kept):]  # the lowest ones
    for s in kept:  # never cut mid-way
        assert s.text in "\n".join(b.text for b in packed.blocks())
    assert all("does not fit" in why for _, why in packed.skipped)
    assert packed.sources == [s.source for s in kept]
    record = packed.record()
    assert record["sources"] == packed.sources
    assert [x["source"] for x in record["skipped"]] == [s.source for s in skipped]


def test_a_big_section_is_skipped_whole_and_a_smaller_later_one_still_fits() -> None:
    big = Section("recent", "y" * 4000, "thread:recent")
    small = Section("memory", "remember: tea", "memory:1")
    packed = pack([("core", "c")], [big, small], 200, task="t")
    assert packed.included == [small]
    assert packed.skipped[0][0] is big
    assert packed.used_tokens == estimate_tokens(len("## core\nc")) + estimate_tokens(1) + \
        estimate_tokens(len(small.labelled))
