"""The prompt-lookup copier (budgetdraft.decoding.baselines.lookup): its proposals are transformers' prompt lookup's,
it is lossless against AR on the real model, the copy share of a sequence is what it should be, and every row says
what became of the draft made for each token (DecodeCounts.outcomes)."""

import random

import pytest
import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from budgetdraft.decoding.baselines.lookup import LookupDrafter, copied, propose
from budgetdraft.decoding.loop import autoregressive, speculative
from budgetdraft.decoding.metrics import ACCEPTED, REJECTED, UNDRAFTED, DecodeCounts


def transformers_proposal(sequence: list[int], gamma: int, ngram: int) -> list[int]:
    generator = PromptLookupCandidateGenerator(num_output_tokens=gamma, max_matching_ngram_size=ngram, max_length=10**9)
    out, _ = generator.get_candidates(torch.tensor([sequence]))
    return out[0, len(sequence) :].tolist()


def test_proposals_are_transformers_prompt_lookups():
    """On fixed sequences (and 2,000 random ones over small vocabularies, where n-grams repeat): the same tokens,
    the leftmost earlier occurrence of the longest n-gram up to `ngram`, up to γ of what followed it, none at all
    when nothing matches."""
    fixed = [
        ([5, 6, 7, 5, 6], 3, 2, [7, 5, 6]),  # "5 6" occurred at 0: what followed it
        ([1, 2, 3, 9, 2, 3], 2, 2, [9, 2]),
        ([1, 2, 3, 4], 5, 2, []),  # nothing repeats
        ([4, 1, 4, 2, 4], 2, 1, [1, 4]),  # the 1-gram "4": its first occurrence
        ([7, 8, 9, 7, 8, 1, 7, 8], 4, 3, [9, 7, 8, 1]),  # "7 8" (no earlier "1 7 8"): the first "7 8"
    ]
    for sequence, gamma, ngram, expected in fixed:
        assert propose(sequence, gamma, ngram) == expected == transformers_proposal(sequence, gamma, ngram), sequence
    rng = random.Random(0)
    for _ in range(2000):
        sequence = [rng.randrange(rng.randint(2, 8)) for _ in range(rng.randint(2, 40))]
        gamma, ngram = rng.randint(1, 6), rng.randint(1, 3)
        assert propose(sequence, gamma, ngram) == transformers_proposal(sequence, gamma, ngram), (sequence, gamma)


def test_the_copy_share_of_a_sequence():
    """A continuation that repeats its prompt is predicted from its third token on (the first 2-gram to look up is
    the prompt's last and the first generated token); a continuation of new tokens is never predicted."""
    prompt = [10, 11, 12, 13, 14, 15]
    assert copied(prompt, [10, 11, 12, 13], 2) == [False, True, True, True]  # "15 10" unseen; "10 11" -> 12 ...
    assert copied(prompt, [20, 21, 22], 2) == [False, False, False]
    assert copied([1, 2, 3, 1], [2, 3], 2) == [True, True]  # "3 1" unseen, the 1-gram "1" first before 2; "1 2" -> 3
    assert copied([1, 2, 3, 1], [2, 3], 3) == [True, True]
    assert copied([1, 2, 1, 3], [1, 2], 2) == [False, True]  # "1 3" and "3" unseen; then "1" first before 2


def test_each_token_records_what_became_of_its_draft():
    counts = DecodeCounts()
    counts.record_round(0, 0)  # the prefill's token: undrafted
    counts.record_round(5, 2)  # two drafts held, the third was replaced by the verifier
    counts.record_round(3, 3)  # every draft held: the bonus after them had no draft
    counts.record_round(0, 0, 1)  # a round where the copier proposed nothing: the verifier's token alone
    counts.record_round(4, 4, 2)  # cut at max_new_tokens inside the accepted drafts
    assert counts.outcomes == [
        UNDRAFTED, ACCEPTED, ACCEPTED, REJECTED, ACCEPTED, ACCEPTED, ACCEPTED, UNDRAFTED, UNDRAFTED, ACCEPTED, ACCEPTED,
    ]  # fmt: skip
    assert (counts.drafted, counts.accepted) == (12, 9)


@pytest.mark.real
def test_the_copier_is_lossless_against_ar_on_the_real_model(real_pair):
    """Speculative decoding with the copier as drafter emits the verifier's own greedy tokens, on a prompt it can copy
    from (a passage said four times) and one it cannot; it proposed drafts, and some were accepted."""
    verifier, _, tokenizer = real_pair
    passage = "The quick brown fox jumps over the lazy dog, and the dog sleeps on in the afternoon sun. "
    decoded = []
    for text in (passage * 4, "Once upon a time, in a kingdom by the sea, there lived a lonely king"):
        ids = tokenizer(text)["input_ids"]
        ar = autoregressive(verifier, ids, 48, eos_token_id=[])
        sd = speculative(LookupDrafter(verifier), verifier, ids, 48, 5, eos_token_id=[])
        assert sd.tokens == ar.tokens
        assert len(sd.stats.outcomes) == len(sd.tokens) == 48
        decoded.append(sd)
    assert sd.stats.drafted >= 0 and ar.stats.drafted == 0
    repeated = decoded[0]  # the passage said four times: copied from
    assert repeated.stats.accepted > 0 and repeated.stats.accepted <= repeated.stats.drafted
