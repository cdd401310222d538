"""EAGLE-3 (Li et al. 2025): a draft head over the verifier's fused low/mid/high-layer hidden states, trained with
training-time test, drafting a chain of γ greedy tokens for ``budgetdraft.decoding.speculative``.

Head (as EAGLE-3's ``cnets.py``): the outputs of verifier decoder layers ``layer_ids`` (default 2, L/2, L−3) are
concatenated and projected by ``fc`` (3H → H); one decoder layer whose attention reads
cat(RMSNorm(embedding of the next token), RMSNorm(feature)) (2H → q/k/v), with the feature as residual, then an
MLP, a final RMSNorm, and the verifier's own (frozen) LM head; the token embedding is the verifier's (frozen).
Simplification: the full verifier vocabulary is drafted (EAGLE-3 maps a reduced draft vocabulary back).

Entries: the real entry of position t pairs the verifier feature f_t with the token x_{t+1} (RoPE position t+1)
and predicts x_{t+2}. A chain step j ≥ 1 pairs the head's own previous output hidden state with the previous
draft token (position t+1+j) and attends to the real entries ≤ t and to its own chain.

Training-time test (``train``): the head is unrolled ``ttt_steps`` times; step 0 runs on the verifier features
of every position (teacher tokens), step j ≥ 1 feeds step j−1's output hidden states back as features with the
tokens j positions ahead, attending causally to the step-0 keys and to its own keys of steps 1..j at the same
position (EAGLE-3's diagonal mask), over the last ``ttt_window`` positions of the sequence. Loss: CE against the
verifier's own greedy token at every position (its LM head on the same forward that gives the features; EAGLE-3
uses the target model's soft distribution), on ``step0_positions`` random positions for step 0 and every
unrolled position for steps j ≥ 1, step j weighted ``step_decay``^j.

Drafting (``Eagle3Drafter``, a ``budgetdraft.decoding.drafter.Drafter``): it ``reads`` the outputs of the feature layers
over the prompt, handed to ``prefill`` from the outer verifier's own prefill (``VerifierPrefill.layer_outputs``:
no second verifier prefill, except for a prefill copied from a shared file, which ``speculative`` runs again and
charges to ``drafter_prefill_s``), and every layer's hidden states of each verify forward: ``after_verify`` takes
those of the accepted positions as the next real entries. ``drafter_prefill_s`` includes the head's pass over the
prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from budgetdraft.decoding.drafter import GreedyDrafter, Reads, VerifierPrefill
from budgetdraft.decoding.draftspec import DraftSpec
from budgetdraft.decoding.kvcache import PreallocatedCache
from budgetdraft.decoding.metrics import cache_bytes, module_tensors

HEAD_FILE, CONFIG_FILE = "head.safetensors", "eagle3.json"


def default_layer_ids(num_layers: int) -> list[int]:
    """EAGLE-3's low / mid / high layers (2, L//2, L−3), kept below the last layer (whose output is normed)."""
    top = max(num_layers - 2, 0)
    return [min(2, top), min(num_layers // 2, top), min(max(num_layers - 3, 0), top)]


def head_config(verifier, layer_ids=None) -> dict:
    c = verifier.config
    heads = c.num_attention_heads
    return {
        "hidden_size": c.hidden_size,
        "num_heads": heads,
        "num_kv_heads": getattr(c, "num_key_value_heads", heads),
        "head_dim": getattr(c, "head_dim", None) or c.hidden_size // heads,
        "intermediate_size": c.intermediate_size,
        "rms_norm_eps": c.rms_norm_eps,
        "vocab_size": c.vocab_size,
        "layer_ids": list(layer_ids) if layer_ids else default_layer_ids(c.num_hidden_layers),
        "draft_vocab": "full",
    }


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype) * self.weight


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Eagle3Head(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        h, d, i, eps = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["rms_norm_eps"]
        self.nh, self.nkv, self.d = cfg["num_heads"], cfg["num_kv_heads"], d
        self.layer_ids = list(cfg["layer_ids"])
        self.fc = nn.Linear(3 * h, h, bias=False)
        self.input_norm, self.hidden_norm = RMSNorm(h, eps), RMSNorm(h, eps)
        self.q_proj = nn.Linear(2 * h, self.nh * d, bias=False)
        self.k_proj = nn.Linear(2 * h, self.nkv * d, bias=False)
        self.v_proj = nn.Linear(2 * h, self.nkv * d, bias=False)
        self.o_proj = nn.Linear(self.nh * d, h, bias=False)
        self.post_norm = RMSNorm(h, eps)
        self.gate_proj, self.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.norm = RMSNorm(h, eps)

    def qkv(self, emb, hid, cos, sin):
        """emb, hid [B, q, H] -> (q [B, nh, q, D], k, v [B, nkv, q, D]) with RoPE applied."""
        b, n, _ = emb.shape
        x = torch.cat([self.input_norm(emb), self.hidden_norm(hid)], dim=-1)
        q = self.q_proj(x).view(b, n, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.nkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.nkv, self.d).transpose(1, 2)
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def finish(self, hid, attn):
        """attn [B, nh, q, D] -> the layer's output hidden state [B, q, H] (residual = the feature)."""
        b, _, n, _ = attn.shape
        h = hid + self.o_proj(attn.transpose(1, 2).reshape(b, n, -1))
        x = self.post_norm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def expand(self, t):
        return t.repeat_interleave(self.nh // self.nkv, dim=1)

    def step(self, emb, hid, cos, sin, cache: PreallocatedCache):
        """Inference: new entries (causal among themselves) attend to everything in ``cache``."""
        q, k, v = self.qkv(emb, hid, cos, sin)
        keys, values = cache.layers[0].update(k, v)
        n, total = q.shape[2], keys.shape[2]
        mask = torch.arange(total, device=q.device)[None] <= torch.arange(total - n, total, device=q.device)[:, None]
        attn = F.scaled_dot_product_attention(q, self.expand(keys), self.expand(values), attn_mask=mask)
        return self.finish(hid, attn)


def rope(verifier, positions: torch.Tensor, dtype):
    """cos, sin [B, q, D] of the verifier's own rotary embedding at ``positions`` [B, q]."""
    dummy = torch.empty(1, dtype=dtype, device=positions.device)
    return verifier.model.rotary_emb(dummy, positions)


def verifier_features(verifier, input_ids: torch.Tensor, layer_ids, greedy: bool = False):
    """[B, T, 3H]: outputs of the verifier's decoder layers ``layer_ids``. With ``greedy``, also [B, T]: the
    verifier's greedy token after every position (its LM head on the final hidden state, 256 rows at a time)."""
    out = verifier.get_decoder()(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    if not greedy:
        return feats
    lm_head = verifier.get_output_embeddings()
    return feats, torch.cat([lm_head(h).argmax(-1) for h in out.last_hidden_state.split(256, dim=1)], dim=1)


# --------------------------------------------------------------------------------------------------------------
# Training with training-time test


def load_head(directory, device="cpu", dtype="float32") -> Eagle3Head:
    from safetensors.torch import load_file

    from budgetdraft.decoding.loading import torch_dtype

    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no EAGLE-3 head in {directory} (missing {CONFIG_FILE})")
    cfg = json.loads((directory / CONFIG_FILE).read_text())
    head = Eagle3Head(cfg)
    head.load_state_dict(load_file(str(directory / HEAD_FILE)))
    return head.to(device=device, dtype=torch_dtype(dtype)).eval()


# --------------------------------------------------------------------------------------------------------------
# Drafting


class Eagle3Drafter(GreedyDrafter):
    """EAGLE-3's head drafting for ``speculative`` (``budgetdraft.decoding.drafter.Drafter``)."""

    def __init__(self, verifier, head: Eagle3Head, prefill_chunk=None):
        cfg = head.cfg
        if cfg["hidden_size"] != verifier.config.hidden_size or cfg["vocab_size"] != verifier.config.vocab_size:
            raise ValueError("the EAGLE-3 head was trained for another verifier (hidden size / vocab differ)")
        self.model, self.head, self.device = verifier, head, verifier.device
        self.prefill_chunk = prefill_chunk
        self.embed, self.lm_head = verifier.get_input_embeddings(), verifier.get_output_embeddings()
        self.dtype = head.fc.weight.dtype
        self.reads = Reads(layers=tuple(sorted(set(head.layer_ids))), hidden_states=True)

    def _run(self, emb_tokens: list[int], hid: torch.Tensor) -> torch.Tensor:
        n = len(emb_tokens)
        pos = torch.arange(self.position, self.position + n, device=self.device)[None]
        cos, sin = rope(self.model, pos, self.dtype)
        emb = self.embed(torch.tensor([emb_tokens], device=self.device)).to(self.dtype)
        out = self.head.step(emb, hid, cos, sin, self.cache)
        self.position += n
        return out

    def _token(self, h: torch.Tensor) -> int:
        return int(self.lm_head(self.head.norm(h[:, -1:]).to(self.lm_head.weight.dtype))[0, -1].argmax())

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, capacity: int, verifier: VerifierPrefill) -> None:
        p = prompt.shape[1]
        outputs = verifier.layer_outputs
        feats = torch.cat([outputs[i] for i in self.head.layer_ids], dim=-1).to(self.device)  # [1, P, 3H]
        self.cache = PreallocatedCache(1, p + capacity + 1)
        self.position = 1  # entry t (feature f_t, token x_{t+1}) sits at position t+1
        if p > 1:
            self._run(prompt[0, 1:].tolist(), self.head.fc(feats[:, : p - 1].to(self.dtype)))
        self.n_real = self.cache.get_seq_length()
        self.q_feats, self.q_tokens = feats[:, p - 1 :], []  # the last feature waits for its next token
        self.last_drafts: list[int] = []

    @torch.no_grad()
    def draft(self, pending: list[int], gamma: int) -> list[int]:
        if len(self.q_tokens) == self.q_feats.shape[1] - 1:
            self.q_tokens.append(pending[-1])
        if not self.q_tokens or self.q_tokens[-1] != pending[-1] or len(self.q_tokens) != self.q_feats.shape[1]:
            raise AssertionError("EAGLE-3 drafter out of step with the verify loop")
        self.cache.truncate(self.n_real)  # drop the last chain
        self.position = self.n_real + 1
        h = self._run(self.q_tokens, self.head.fc(self.q_feats.to(self.dtype)))
        self.n_real = self.cache.get_seq_length()
        self.q_feats, self.q_tokens = self.q_feats[:, :0], []
        drafts = [self._token(h)]
        hid = h[:, -1:]
        self.chain_hidden = [hid]  # the head's output at depth 0..γ−1 (tests compare it with ttt_unroll)
        for _ in range(gamma - 1):
            hid = self._run([drafts[-1]], hid)
            self.chain_hidden.append(hid)
            drafts.append(self._token(hid))
        self.last_drafts = drafts
        return drafts

    def rollback(self, kept_new: int) -> None:
        """Nothing to do: the chain is dropped at the next ``draft``; real entries come from ``after_verify``."""

    @torch.no_grad()
    def after_verify(self, verifier_output, accepted: int, bonus: int) -> None:
        hs = verifier_output.hidden_states
        feats = torch.cat([hs[i + 1][:, : accepted + 1] for i in self.head.layer_ids], dim=-1).to(self.device)
        self.q_feats = torch.cat([self.q_feats, feats], dim=1)
        self.q_tokens += self.last_drafts[:accepted] + [bonus]
        self.last_drafts = []

    def kv_bytes(self) -> int:
        return cache_bytes(self.cache)  # the head's one-layer cache

    def weight_tensors(self):
        return module_tensors(self.head)  # its embedding and LM head are the verifier's, counted with it


def drafter_factory(verifier, draft: DraftSpec, extra: dict, load=None):
    """``eval-cell`` method eagle3: its head (a head directory, not a causal LM: ``load`` is not asked) loaded once;
    returns () -> a fresh EAGLE-3 drafter per run."""
    if extra:
        raise ValueError(f"eagle3 takes no --extra settings besides `training`, got {sorted(extra)}")
    head = load_head(draft.drafter, draft.device, draft.drafter_dtype)
    return lambda: Eagle3Drafter(verifier, head)


# --------------------------------------------------------------------------------------------------------------
# Command line: python -m budgetdraft train-eagle3 --verifier DIR --targets FILE --out DIR --hparams JSON
