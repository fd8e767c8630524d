"""The sampler's tree without a model: forks, finishes, slot reuse, compaction, one row per sample.

The hand-built cases spell out each step; the randomized one replays many trees against a
simulated KV cache (each slot's token history, copied and gathered exactly as the decoder does)
and checks that every live row is decoded in a slot holding its own history.
"""

from __future__ import annotations

import random

import pytest
import torch

from reachlens.engine.sample_tree import SampleTree

EOS, STOP, PAD = 0, 1, 99


class TokenStops:
    """Token ``EOS`` ends a row as EOS, token ``STOP`` as a stop string; with ``pair``, also the
    tokens ``pair`` emitted twice in a row (a stop string that straddles two tokens)."""

    def __init__(self, pair: int | None = None) -> None:
        self.pair = pair
        self.calls: list[tuple[list[int], list[list[int]]]] = []

    def check(self, chosen, history, rows, step):
        eos = chosen == EOS
        stop = (chosen == STOP) & ~eos
        if self.pair is not None and step >= 1:
            both = (history[rows, step - 1] == self.pair) & (history[rows, step] == self.pair)
            stop |= both & ~eos
        self.calls.append((chosen.tolist(), history[rows, : step + 1].tolist()))
        return eos, stop


def tree(slots, n_slots, *, share=True, max_new=8, stopper=None):
    return SampleTree(torch.tensor(slots), n_slots, max_new, stopper or TokenStops(), share=share, pad_id=PAD)


def t(*xs):
    return torch.tensor(xs, dtype=torch.long)


def test_rows_that_agree_stay_one_node():
    tr = tree([0, 0, 0], 1)
    step = tr.advance(t(5, 5, 5))
    assert step.fork_dst.tolist() == [] and step.grown == 0 and step.compaction is None
    assert step.inputs.tolist() == [5] and tr.members() == ((0, 1, 2),)
    assert tr.row_tokens(2) == [5] and tr.step == 1


def test_a_node_whose_rows_disagree_forks_into_new_slots():
    tr = tree([0, 0, 0, 0], 1)
    step = tr.advance(t(7, 5, 9, 5), torch.tensor([-0.1, -0.2, -0.3, -0.2]))
    # children by token id: 5 continues in slot 0; 7 and 9 are forks, copied from slot 0
    assert step.fork_src.tolist() == [0, 0] and step.fork_dst.tolist() == [1, 2] and step.grown == 2
    assert step.inputs.tolist() == [5, 7, 9]
    assert tr.slot_of_row.tolist() == [1, 0, 2, 0] and tr.members() == ((1, 3), (0,), (2,))
    assert tr.n_slots == 3 and tr.row_logprobs(2) == [pytest.approx(-0.3)]


def test_finished_rows_leave_with_their_reason():
    tr = tree([0, 1, 2], 3)
    step = tr.advance(t(EOS, STOP, 5))
    assert step.finished.tolist() == [0, 1] and tr.live.tolist() == [2]
    assert tr.reasons == ["eos", "stop", "length"] and tr.slot_of_row.tolist() == [-1, -1, 0]
    # two of three slots free: compacted, the survivor moves to slot 0
    assert step.compaction.tolist() == [2] and step.inputs.tolist() == [5] and tr.n_slots == 1
    assert tr.row_tokens(0) == [EOS] and tr.row_tokens(1) == [STOP]


def test_a_fork_reuses_a_slot_left_free():
    tr = tree([0, 0, 1, 1], 2)
    step = tr.advance(t(EOS, EOS, 5, 7))  # slot 0's node finishes; slot 1's forks
    assert step.fork_src.tolist() == [1] and step.fork_dst.tolist() == [0] and step.grown == 0
    assert step.compaction is None and step.inputs.tolist() == [7, 5]
    assert tr.slot_of_row.tolist() == [-1, -1, 1, 0]


def test_free_slots_are_filled_from_the_end_of_the_batch():
    tr = tree(list(range(8)), 8)
    step = tr.advance(t(5, EOS, 5, 5, 5, 5, 5, EOS))  # slots 1 and 7 free: slot 6 moves into 1, the rest stay
    assert step.compaction.tolist() == [0, 6, 2, 3, 4, 5] and tr.n_slots == 6
    assert tr.slot_of_row.tolist() == [0, -1, 2, 3, 4, 5, 1, -1] and step.inputs.tolist() == [5] * 6
    step = tr.advance(t(5, 5, EOS, 5, 5, 6))  # live rows 0, 2-6 (row 6 in slot 1); row 3 (slot 3) finishes
    assert step.compaction.tolist() == [0, 1, 2, 5, 4] and tr.n_slots == 5
    assert tr.slot_of_row.tolist() == [0, -1, 2, -1, 4, 3, 1, -1]
    assert step.inputs.tolist() == [5, 6, 5, 5, 5]


def test_no_compaction_while_every_slot_is_in_use():
    tr = tree([0, 1, 1], 2)
    step = tr.advance(t(5, 6, 7))  # slot 1 forks into a new slot; none is free
    assert step.compaction is None and step.grown == 1 and tr.n_slots == 3


def test_one_row_per_sample_never_forks_or_compacts():
    tr = tree([0, 1, 2, 3], 4, share=False)
    step = tr.advance(t(5, 5, 5, 5))  # same token, same prompt: still one slot per row
    assert step.fork_dst.tolist() == [] and step.inputs.tolist() == [5, 5, 5, 5]
    step = tr.advance(t(EOS, STOP, EOS, 6))
    assert step.compaction is None and tr.n_slots == 4
    assert step.inputs.tolist() == [PAD, PAD, PAD, 6] and tr.slot_of_row.tolist() == [-1, -1, -1, 3]


def test_done_at_the_length_limit_and_when_every_row_finished():
    tr = tree([0, 0], 1, max_new=2)
    assert not tr.advance(t(5, 6)).done
    last = tr.advance(t(5, 6))
    assert last.done and last.inputs is None and tr.done and tr.reasons == ["length", "length"]
    with pytest.raises(RuntimeError, match="finished sample tree"):
        tr.advance(t(5, 6))
    tr = tree([0, 0], 1)
    assert tr.advance(t(EOS, STOP)).done and tr.reasons == ["eos", "stop"]


def test_the_stop_check_reads_one_row_of_each_child_with_its_history():
    stopper = TokenStops(pair=3)
    tr = tree([0, 0, 0], 1, stopper=stopper)
    tr.advance(t(3, 3, 4))
    tr.advance(t(3, 2, 3))  # rows 0 and 2 emit 3: only row 0 has emitted 3 twice in a row
    chosen, histories = stopper.calls[-1]
    assert sorted(zip(chosen, map(tuple, histories))) == [(2, (3, 2)), (3, (3, 3)), (3, (4, 3))]
    assert tr.reasons == ["stop", "length", "length"]


@pytest.mark.parametrize("share", [True, False])
def test_random_trees_keep_every_row_in_a_slot_holding_its_own_history(share):
    rng = random.Random(0)
    seen = {"forks": 0, "reused": 0, "grown": 0, "compactions": 0, "finished": 0}
    for trial in range(60):
        n_prompts = rng.randint(1, 3)
        per = [rng.randint(1, 6) for _ in range(n_prompts)]
        prompt_of_row = [p for p, k in enumerate(per) for _ in range(k)]
        n = len(prompt_of_row)
        max_new = rng.randint(1, 9)
        vocab = rng.choice([3, 4, 6])  # tokens 0 (EOS) .. vocab-1; 1 is a stop token, 3 twice a stop string
        # the simulated cache: per slot, (prompt, tokens fed so far); the prefill fills one slot
        # per prompt (shared) or one per row
        if share:
            start, cache = prompt_of_row, [(p, ()) for p in range(n_prompts)]
        else:
            start, cache = list(range(n)), [(p, ()) for p in prompt_of_row]
        tr = SampleTree(torch.tensor(start), len(cache), max_new, TokenStops(pair=3), share=share, pad_id=PAD)
        while not tr.done:
            live = tr.live.tolist()
            for r, s in zip(live, tr.live_slots().tolist()):
                assert cache[s] == (prompt_of_row[r], tuple(tr.row_tokens(r))), (trial, r)
            if share:  # one node per distinct prefix
                prefixes = {(prompt_of_row[r], tuple(tr.row_tokens(r))) for r in live}
                assert len(set(tr.live_slots().tolist())) == len(prefixes)
            else:
                assert tr.live_slots().tolist() == live
            # rows of a node draw independently
            step = tr.advance(torch.tensor([rng.randrange(vocab) for _ in live]))
            if step.done:
                break
            seen["forks"] += step.fork_dst.numel()
            seen["reused"] += int((step.fork_dst < tr.n_slots - step.grown).sum()) if step.compaction is None else 0
            seen["grown"] += step.grown
            seen["compactions"] += step.compaction is not None
            seen["finished"] += step.finished.numel()
            cache += [None] * step.grown
            for s, d in zip(step.fork_src.tolist(), step.fork_dst.tolist()):
                cache[d] = cache[s]
            if step.compaction is not None:
                cache = [cache[i] for i in step.compaction.tolist()]
            assert len(cache) == tr.n_slots == len(step.inputs)
            cache = [c if x == PAD else (c[0], c[1] + (x,)) for c, x in zip(cache, step.inputs.tolist())]
        for r in range(n):
            toks = tr.row_tokens(r)
            ended = [i for i, x in enumerate(toks) if x in (EOS, STOP) or (x == 3 and i and toks[i - 1] == 3)]
            expect = "length" if not ended else ("eos" if toks[ended[0]] == EOS else "stop")
            assert tr.reasons[r] == expect and (not ended or ended[0] == len(toks) - 1), (trial, r, toks)
            assert len(toks) <= max_new
    if share:  # the trees exercised every kind of move
        assert all(v > 0 for v in seen.values()), seen
    else:
        assert seen["forks"] == seen["compactions"] == 0 and seen["finished"] > 0, seen
