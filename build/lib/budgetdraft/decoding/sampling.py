"""Sampling mode: temperature / top-k / top-p decoding and the lossless speculative sampling rule.

The paper decodes greedily (``sampling=None`` everywhere, the default). In sampling mode every token is drawn from
the verifier's *sampling distribution* p: its logits divided by the temperature, cut to the top-k logits, then to
the top-p nucleus, renormalised. The drafter samples its drafts from q, its own logits under the same
transformation. Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) keeps the output distribution p:

  draft x ~ q is accepted with probability min(1, p(x) / q(x)), drafts in order;
  at the first rejection the token is drawn from norm(max(0, p − q)) and the round ends;
  when every draft is accepted, the bonus token is drawn from p after the last draft.

Randomness: one ``torch.Generator`` on the CPU per generation, seeded by ``Sampling.seed``; every draw is an
inverse-CDF lookup in float64 on the CPU, so a seed gives the same tokens on any device (up to the float
differences of the logits themselves). Temperature 0 makes p and q one-hot at their argmax: the rule then accepts
exactly the drafts equal to the verifier's greedy token and resamples that token, i.e. greedy decoding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from budgetdraft.base.defaults import SEEDS

MAX_TEMPERATURE = 100.0  # past it logits of ±20 differ by less than ±0.2: every token drawn almost alike (random text)


@dataclass(frozen=True)
class Sampling:
    """How tokens are drawn: ``temperature`` ≥ 0 (0 = greedy), ``top_p`` in (0, 1] (1 = no nucleus cut),
    ``top_k`` ≥ 0 (0 = no cut) and the ``seed`` of a generation's random stream."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self):
        if not self.temperature >= 0:  # also rejects NaN
            raise ValueError(f"sampling temperature must be >= 0, got {self.temperature}")
        if self.temperature > MAX_TEMPERATURE:
            raise ValueError(
                f"sampling temperature must be at most {MAX_TEMPERATURE:g}, got {self.temperature:g}: it would draw "
                "every token alike (random text)"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling top_p must be in (0, 1], got {self.top_p}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"sampling top_k must be an integer >= 0, got {self.top_k}")
        if int(self.seed) != self.seed:
            raise ValueError(f"sampling seed must be an integer, got {self.seed}")
        if not 0 <= self.seed < SEEDS:  # torch.Generator's seed overflows past 2^64, in a traceback
            raise ValueError(f"sampling seed must be in [0, {SEEDS - 1}], got {self.seed}")

    def as_dict(self) -> dict:
        return asdict(self)


def sampling_distribution(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """p (or q): ``logits`` [..., V] under temperature, then top-k, then top-p, as float64 probabilities on the
    CPU. Temperature 0: one-hot at the argmax (top-k / top-p always keep the argmax)."""
    logits = logits.detach().to("cpu", torch.float64)
    if sampling.temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    probs = logits.softmax(-1)
    if sampling.top_p < 1:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above each one
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, before >= sampling.top_p)
        probs = probs.masked_fill(drop, 0.0)  # keeps the smallest top set whose mass reaches top_p
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def acceptance_probability(p_x: float, q_x: float) -> float:
    """min(1, p(x) / q(x)) for a draft x drawn from q (so q(x) > 0)."""
    if q_x <= 0:
        raise ValueError(f"draft has probability {q_x} under the drafter's distribution: it was not drawn from q")
    return 1.0 if p_x >= q_x else p_x / q_x


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p − q), unnormalised: what a rejected draft is replaced from. Only if rounding leaves no mass
    (p = q, where a rejection has probability 0) is it p itself."""
    r = (p - q).clamp_(min=0)
    return r if r.sum() > 0 else p


class Sampler:
    """One generation's random stream and the draws made from it (``Sampling`` says how)."""

    def __init__(self, sampling: Sampling):
        self.sampling = sampling
        self.generator = torch.Generator().manual_seed(int(sampling.seed))

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def draw(self, weights: torch.Tensor) -> int:
        """A token drawn with probability proportional to ``weights`` [V] ≥ 0 (inverse CDF)."""
        cdf = weights.cumsum(-1)
        idx = int(torch.searchsorted(cdf, self.uniform() * cdf[-1], right=True))
        if idx >= len(weights):  # u · total rounded up to total: the last token with any weight
            idx = int(weights.nonzero()[-1])
        return idx

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return sampling_distribution(logits, self.sampling)

    def sample(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """A token drawn from the sampling distribution of ``logits`` [V], and that distribution."""
        probs = self.distribution(logits)
        return self.draw(probs), probs

    def accepts(self, p_x: float, q_x: float) -> bool:
        return self.uniform() < acceptance_probability(p_x, q_x)

    def speculative_step(self, p: torch.Tensor, q: torch.Tensor, drafts: list[int]) -> tuple[int, int]:
        """The speculative sampling rule for one round: p [γ+1, V] the verifier's distributions after the last
        emitted token and after each draft, q [γ, V] the drafter's that the drafts were drawn from. Returns the
        accepted drafts k and the next token (the resample of the rejected draft, or the bonus drawn from p)."""
        for i, x in enumerate(drafts):
            if not self.accepts(float(p[i, x]), float(q[i, x])):
                return i, self.draw(residual(p[i], q[i]))
        return len(drafts), self.draw(p[len(drafts)])


def sampling_from_flags(temperature: float, top_p: float = 1.0, top_k: int = 0, seed: int = 0) -> Sampling | None:
    """The decoding of the command line / pipeline settings: None (greedy, the paper's setting) at temperature 0,
    else ``Sampling``. Values are checked either way, so a bad top_p is named even when greedy, by its flag
    (``--top-p: sampling top_p must be in (0, 1], got 2.0``)."""
    try:
        sampling = Sampling(temperature, top_p, top_k, seed)
    except ValueError as err:  # name the flag, not the field
        raise ValueError(f"--{str(err).split()[1].replace('_', '-')}: {err}") from None
    return None if sampling.temperature == 0 else sampling


GREEDY = 0.0  # the temperature of a decoding that samples nothing: the command line's and the config's default
