"""Sparse-KV speculative decoding inside transformers' own ``generate``.

    out = verifier.generate(input_ids, custom_generate=budgetdraft.decoding.hf_generate.generate, drafter=drafter, kv_budget=64,
                            kv_policy="topk_chunks", gamma=5, max_new_tokens=128)

``generate`` prepares the request as for any decoding mode (generation config, ``max_new_tokens`` → ``max_length``,
EOS, stopping criteria, logits processors) and hands this module's ``generate`` the decoding loop; the keyword
arguments it declares beyond ``GenerationMixin._sample``'s (``drafter``, ``kv_budget``, ``kv_policy``, ``gamma``,
``seed``, ``token_streamer``, ``engine``) are passed through (transformers 5.23, ``generation/utils.py``, ``_extract_generation_mode_kwargs``).
The loop is ``budgetdraft.decoding.speculative``, the one home of the algorithm: greedy (``do_sample=False``) gives
the verifier's own greedy tokens, ``do_sample=True`` draws by the lossless speculative sampling rule of
``budgetdraft.decoding.sampling`` with generate's temperature / top-k / top-p. Nothing else changes the verifier's
distribution: any other logits processor a request asks for (repetition penalty, ``min_new_tokens``, ...) is
refused, named. One prompt at a time (batch 1, no padding, ``num_beams`` = ``num_return_sequences`` = 1).

Every token goes to the streamer and through generate's stopping criteria (EOS and ``max_length`` among them) as
the verifier decides it: ``Emitted`` is the loop's observer, called once per round; a criterion that holds ends the
loop there, as it ends generate's own loop. transformers 5.23 does not hand a callable ``custom_generate`` the
``streamer`` (it puts the prompt into it, then leaves it out of the loop's arguments): pass a streamer as
``token_streamer=`` instead, which gets the prompt and then every token. A repository's ``generate.py`` (below) is
called with generate's own arguments and hands ``streamer`` on as ``token_streamer``.

A drafter published with its loop: ``python -m budgetdraft export-hf-generate --out DRAFTER_DIR`` writes
``DRAFTER_DIR/custom_generate/generate.py`` (transformers' hub convention), which loads that drafter and runs
``generate`` above, so that ``verifier.generate(ids, custom_generate="user/drafter", trust_remote_code=True,
kv_budget=64)`` works from the hub or a local directory. Our own code never sets ``trust_remote_code``.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import torch
from transformers.generation import GenerateDecoderOnlyOutput, StoppingCriteriaList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from budgetdraft.base.atomic import atomic_write_text
from budgetdraft.base.defaults import ENGINE, GAMMA, POLICY, SEEDS
from budgetdraft.decoding.loop import Round, speculative
from budgetdraft.decoding.policies import POLICIES
from budgetdraft.decoding.sampling import Sampling
from budgetdraft.decoding.sparse_drafter import SparseDrafter
from budgetdraft.decoding.verifier import ids_tensor

# the logits processors of a sampling request that ``Sampling`` applies itself, by the field they set
WARPERS = {TemperatureLogitsWarper: "temperature", TopKLogitsWarper: "top_k", TopPLogitsWarper: "top_p"}
OUTPUT_FLAGS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


class Emitted:
    """The observer of ``speculative``'s rounds (``budgetdraft.decoding.loop.Observer``): every token goes to the
    streamer and through the stopping criteria in order, as in generate's own loop; a round's tokens are kept up to
    the first at which a criterion holds, and the loop ends there."""

    def __init__(self, prompt: torch.Tensor, criteria: StoppingCriteriaList, streamer=None):
        self.criteria, self.streamer = criteria, streamer
        self.sequence = prompt  # [1, P + tokens so far]: what the criteria read
        self.tokens: list[int] = []

    def __call__(self, round: Round) -> bool:
        """Emit the round's tokens; True when a stopping criterion ended the generation."""
        start = self.sequence.shape[1]
        sequence = torch.cat([self.sequence, ids_tensor(round.tokens, self.sequence.device)], dim=1)
        keep, stopped = len(round.tokens), False
        for i in range(len(round.tokens)):
            if bool(self.criteria(sequence[:, : start + i + 1], None).any()):
                keep, stopped = i + 1, True
                break
        self.sequence = sequence[:, : start + keep]
        self.tokens += round.tokens[:keep]
        if self.streamer is not None and keep:
            self.streamer.put(torch.tensor(round.tokens[:keep]))
        return stopped


def check_generate_request(model, input_ids: torch.Tensor, generation_config, model_kwargs: dict) -> None:
    """Refuse, naming the setting, what this loop cannot serve exactly: anything but one unpadded prompt decoded
    from scratch into one sequence, or outputs it does not compute."""
    if model.config.is_encoder_decoder:
        raise ValueError(
            "custom_generate=budgetdraft.decoding.hf_generate.generate decodes decoder-only verifiers only"
        )
    for key in ("num_beams", "num_return_sequences"):
        if (getattr(generation_config, key, None) or 1) != 1:
            raise ValueError(f"{key}={getattr(generation_config, key)}: sparse speculative decoding makes one sequence")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"a batch of {input_ids.shape[0]} prompts: sparse speculative decoding takes one prompt (batch size 1); "
            "call generate once per prompt"
        )
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("attention_mask masks prompt positions (padding): pass the one prompt unpadded")
    cache = model_kwargs.get("past_key_values")
    if cache is not None and cache.get_seq_length() > 0:
        raise ValueError("past_key_values holds a cache: the speculative loop prefills the prompt itself")
    asked = [f for f in OUTPUT_FLAGS if generation_config.return_dict_in_generate and getattr(generation_config, f)]
    if asked:
        raise ValueError(f"{', '.join(asked)}: not computed by sparse speculative decoding (sequences only)")


def sampling_of(logits_processor, generation_config, seed: int | None) -> Sampling | None:
    """None (greedy) or the ``Sampling`` of a ``do_sample`` request, read from the warpers generate prepared;
    ``seed`` None draws one from torch's global generator (so ``torch.manual_seed`` reproduces a generation)."""
    other = [type(p).__name__ for p in logits_processor or () if type(p) not in WARPERS]
    if other:
        raise ValueError(
            f"the request adds logits processor(s) {', '.join(other)}, which sparse speculative decoding does not "
            "apply (it keeps the verifier's distribution exact; only temperature, top_k and top_p are supported): "
            "drop the setting that adds them"
        )
    if not generation_config.do_sample:
        return None
    fields = {WARPERS[type(p)]: getattr(p, WARPERS[type(p)]) for p in logits_processor or ()}
    seed = int(torch.randint(0, SEEDS, ())) if seed is None else seed  # within the seeds Sampling takes
    return Sampling(seed=seed, **fields)


def sparse_drafter(drafter, kv_budget, kv_policy: str, gamma, engine: str = ENGINE) -> SparseDrafter:
    """The drafter model with its sparse KV cache, each argument checked and named when wrong."""
    if drafter is None:
        raise ValueError(
            "custom_generate=budgetdraft.decoding.hf_generate.generate needs drafter=<the drafter model> (a causal LM sharing the "
            "verifier's vocabulary, e.g. budgetdraft.decoding.loading.load_model(DIR))"
        )
    if not (isinstance(drafter, torch.nn.Module) and hasattr(drafter, "config")):
        raise ValueError(f"drafter= must be a causal LM (a transformers model), got {type(drafter).__name__}")
    if kv_budget is None:
        raise ValueError("kv_budget= is required: the drafter's KV budget B, in tokens of the prompt it keeps")
    if isinstance(kv_budget, bool) or not isinstance(kv_budget, int) or kv_budget < 1:
        raise ValueError(f"kv_budget= must be a positive number of tokens, got {kv_budget!r}")
    if kv_policy not in POLICIES:
        raise ValueError(f"kv_policy={kv_policy!r} is no sparse policy; choose one of {', '.join(POLICIES)}")
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma= (draft length) must be an integer >= 1, got {gamma!r}")
    return SparseDrafter(drafter, kv_budget, kv_policy, engine=engine)  # SparseDrafter checks the engine


@torch.no_grad()
def generate(
    model,
    input_ids: torch.LongTensor,
    logits_processor=None,
    stopping_criteria=None,
    generation_config=None,
    synced_gpus: bool = False,
    streamer=None,
    *,
    drafter=None,
    kv_budget: int | None = None,
    kv_policy: str = POLICY,
    gamma: int = GAMMA,
    seed: int | None = None,
    token_streamer=None,
    engine: str = ENGINE,
    **model_kwargs,
):
    """The decoding loop of ``model.generate(..., custom_generate=generate, drafter=, kv_budget=, ...)``: BudgetDraft's
    sparse-KV speculative decoding with ``drafter`` (a causal LM) at KV budget ``kv_budget`` under ``kv_policy``,
    ``gamma`` drafts per round; ``seed`` seeds a sampling request (None: drawn from torch's global generator);
    ``token_streamer`` gets the prompt, then every token as it is decided (transformers 5.23 keeps generate's own
    ``streamer`` from a callable ``custom_generate``); ``engine``: eager or graphs (``budgetdraft.decoding.engine``).
    Returns what ``generate`` returns: the sequences [1, P + new], or with ``return_dict_in_generate`` a
    ``GenerateDecoderOnlyOutput`` holding them."""
    generation_config = generation_config if generation_config is not None else model.generation_config
    check_generate_request(model, input_ids, generation_config, model_kwargs)
    sampling = sampling_of(logits_processor, generation_config, seed)
    sparse = sparse_drafter(drafter, kv_budget, kv_policy, gamma, engine)
    streamer = token_streamer if token_streamer is not None else streamer  # a later transformers may pass it
    if token_streamer is not None:
        token_streamer.put(input_ids.cpu())
    criteria = stopping_criteria if stopping_criteria is not None else StoppingCriteriaList()
    emitted = Emitted(input_ids, criteria, streamer)
    eos = generation_config.eos_token_id
    try:
        speculative(
            sparse,
            model,
            input_ids[0].tolist(),
            generation_config.max_length - input_ids.shape[1],
            gamma,
            eos_token_id=[] if eos is None else eos,
            sampling=sampling,
            engine=engine,
            observer=emitted,
        )
    finally:
        if streamer is not None:
            streamer.end()
    sequences = torch.cat([input_ids, ids_tensor(emitted.tokens, input_ids.device)], dim=1)
    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(sequences=sequences)
    return sequences


# --------------------------------------------------------------------------------------------------------------
# A drafter published with its loop: custom_generate/generate.py beside the checkpoint (transformers' convention)

_DRAFTERS: dict[tuple, torch.nn.Module] = {}  # drafters loaded by a repository's generate.py, once per process

GENERATE_PY = '''"""BudgetDraft's sparse-KV speculative decoding as this repository's `generate` (written by `python -m budgetdraft
export-hf-generate`; the code runs from the installed `budgetdraft` package).

    verifier.generate(input_ids, custom_generate=REPOSITORY, trust_remote_code=True, kv_budget=64,
                      kv_policy="topk_chunks", gamma=5, max_new_tokens=128)

REPOSITORY is this hub repository or its local directory; its drafter (below) is loaded once per process, unless
`drafter=` passes another. Options: kv_budget (required), kv_policy, gamma, seed, and generate's own.
"""

from budgetdraft.decoding.hf_generate import generate_with_drafter

DRAFTER = {drafter}


def generate(model, **generate_arguments):
    return generate_with_drafter(model, DRAFTER, **generate_arguments)
'''


def stored_drafter(source: str, model) -> torch.nn.Module:
    """The drafter named by ``source`` (a directory or hub id, `models.load_model`) on ``model``'s device and dtype."""
    from budgetdraft.decoding.loading import load_model

    key = (source, str(model.device), str(model.dtype).removeprefix("torch."))
    if key not in _DRAFTERS:
        _DRAFTERS[key] = load_model(*key)
    return _DRAFTERS[key]


def generate_with_drafter(model, source: str, drafter=None, assistant_model=None, streamer=None, **generate_arguments):
    """What a repository's ``custom_generate/generate.py`` runs: transformers calls it with every argument of
    ``generate`` (``model`` the verifier); it calls ``generate`` again with this module's loop and the drafter
    ``source`` (or ``drafter=``), its ``streamer`` handed on as the loop's ``token_streamer``."""
    if assistant_model is not None:
        raise ValueError("assistant_model= switches generate to its own assisted decoding: pass drafter= instead")
    arguments = {key: value for key, value in generate_arguments.items() if value is not None}
    if streamer is not None:
        arguments["token_streamer"] = streamer
    drafter = stored_drafter(source, model) if drafter is None else drafter
    return model.generate(custom_generate=generate, drafter=drafter, **arguments)


def export_generate(out: str | Path, drafter_id: str | None = None) -> Path:
    """Write ``out/custom_generate/{generate.py,requirements.txt}`` beside the drafter checkpoint ``out``; its
    generate.py loads ``drafter_id`` (the repository's hub id; default: ``out``'s absolute path)."""
    out = Path(out)
    if not (out / "config.json").is_file():
        raise FileNotFoundError(f"{out} holds no config.json: --out must be a drafter checkpoint directory")
    folder = out / "custom_generate"
    folder.mkdir(exist_ok=True)
    atomic_write_text(folder / "generate.py", GENERATE_PY.format(drafter=json.dumps(drafter_id or str(out.resolve()))))
    atomic_write_text(folder / "requirements.txt", f"budgetdraft>={importlib.metadata.version('budgetdraft')}\n")
    return folder
