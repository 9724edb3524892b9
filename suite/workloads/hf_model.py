"""The hf_model workload: real model architectures from Hugging Face transformers, built from
small configs with random weights (no download), as PyTorch's own benchmark runners build them.

A Llama-style decoder, GPT-2, BERT, T5 and ViT, each inference or a training step, eager or
compiled. Inference is timed on the SDPA attention path and checked against the model's own
eager attention path in the same dtype, with the eager path in fp64 as truth; an eager inference
cell also tries torch.export of the model (the export gate). A training cell times one AdamW
step and records ten seeded steps' loss curve beside the same steps in fp64 (the convergence
gate). Every cell names its model and config (ctx.model), and compiled cells record their graph
breaks (ctx.explain). Needs the optional extra `models` (transformers): a side without it skips
the cell and says how to give it one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Param, Skip, Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

VOCAB = 256
ARCHS = ("llama", "gpt2", "bert", "t5", "vit")
INSTALL = (
    "transformers is not installed on this side: pip install 'torch-matrix[models]', or give the "
    "side its package (ab --with transformers, or an image built --with transformers)"
)


def _config(arch: str, size: Mapping[str, Any], attention: str) -> Any:
    """A small config of the architecture: a few layers, a narrow width, no cache."""
    import transformers as tf

    h, layers, heads = size["hidden"], size["layers"], size["heads"]
    common: dict[str, Any] = {"attn_implementation": attention}
    if arch == "llama":
        return tf.LlamaConfig(
            vocab_size=VOCAB, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=size["seq"], use_cache=False, **common,
        )  # fmt: skip
    if arch == "gpt2":
        return tf.GPT2Config(
            vocab_size=VOCAB, n_embd=h, n_layer=layers, n_head=heads, n_positions=size["seq"],
            bos_token_id=0, eos_token_id=0, use_cache=False, **common,
        )  # fmt: skip
    if arch == "bert":
        return tf.BertConfig(
            vocab_size=VOCAB, hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=2 * h, max_position_embeddings=size["seq"], **common,
        )  # fmt: skip
    if arch == "t5":
        return tf.T5Config(
            vocab_size=VOCAB, d_model=h, d_kv=h // heads, d_ff=2 * h, num_layers=layers,
            num_heads=heads, use_cache=False, **common,
        )  # fmt: skip
    vit = tf.ViTConfig(
        image_size=size["image"], patch_size=size["patch"], hidden_size=h,
        num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * h, **common,
    )  # fmt: skip
    vit.num_labels = 10
    return vit


_HEADS = {
    "llama": "LlamaForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "bert": "BertForMaskedLM",
    "t5": "T5ForConditionalGeneration",
    "vit": "ViTForImageClassification",
}


def _build(arch: str, size: Mapping[str, Any], attention: str, dtype: torch.dtype) -> nn.Module:
    """The model with its task head, seeded, so that every build has the same weights."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model: nn.Module = getattr(tf, _HEADS[arch])(_config(arch, size, attention))
    return model.to(dtype)


def _inputs(arch: str, size: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """A seeded batch, with labels so that the model returns its loss; own generator."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    batch = size["batch"]
    if arch == "vit":
        pixels = torch.randn(batch, 3, size["image"], size["image"], generator=gen)
        labels = torch.randint(0, 10, (batch,), generator=gen)
        return {"pixel_values": pixels.to(device), "labels": labels.to(device)}
    ids = torch.randint(0, VOCAB, (batch, size["seq"]), generator=gen).to(device)
    return {"input_ids": ids, "labels": ids}


def _cast(inputs: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}


def _output(out: Any) -> torch.Tensor:
    logits: torch.Tensor = out.logits
    return logits


class HfModel(Workload):
    name = "hf_model"
    description = "Hugging Face architectures from small configs: inference and a training step"
    params = (
        Param("model", ARCHS, ("llama", "bert", "vit"), help="architecture, built from a config"),
        Param("task", ("infer", "train"), ("infer", "train")),
        Param("mode", ("eager", "compiled"), ("eager",), help="compiled: torch.compile(model)"),
    )
    sizes = {
        "smoke": {"batch": 2, "seq": 16, "hidden": 32, "layers": 2, "heads": 4, "image": 32,
                  "patch": 8, "steps": 10, "lr": 1e-3},
        "full": {"batch": 8, "seq": 256, "hidden": 256, "layers": 4, "heads": 8, "image": 224,
                 "patch": 16, "steps": 10, "lr": 1e-3},
    }  # fmt: skip
    size_tag_format = "b{batch}h{hidden}"

    def run(self, ctx: CellContext) -> None:
        if importlib.util.find_spec("transformers") is None:
            raise Skip(INSTALL)
        import torch

        arch, compiled = str(ctx.params["model"]), ctx.params["mode"] == "compiled"
        size = dict(ctx.size)
        ctx.seed(0)
        model = _build(arch, size, "sdpa", torch.float32).to(ctx.device)
        ctx.model(model, config=model.config)
        inputs = _inputs(arch, size, ctx.device)
        if ctx.params["task"] == "train":
            self._train(ctx, arch, size, model, inputs, compiled)
        else:
            self._infer(ctx, arch, size, model, inputs, compiled)

    def _infer(
        self, ctx: CellContext, arch: str, size: Mapping[str, Any], model: nn.Module,
        inputs: dict[str, Any], compiled: bool,
    ) -> None:  # fmt: skip
        import torch

        model.eval()
        run: Callable[..., Any] = torch.compile(model) if compiled else model
        if compiled:
            with torch.no_grad():
                ctx.explain(model, **inputs)

        def step() -> torch.Tensor:
            with torch.no_grad():
                return _output(run(**inputs))

        items = size["batch"] * (1 if arch == "vit" else size["seq"])
        ctx.measure(step, items_per_iter=items, unit=_unit(arch), compiled=compiled)
        eager = _build(arch, size, "eager", torch.float32).to(ctx.device).eval()
        truth = _build(arch, size, "eager", torch.float64).eval()
        with torch.no_grad():
            reference = _output(eager(**inputs))
            fp64 = _output(truth(**_cast({k: v.cpu() for k, v in inputs.items()}, torch.float64)))
            ctx.check_accuracy(step(), reference, fp64, reference_name="the eager attention path")
        if not compiled:
            with ctx.export_path("torch_export") as attempt, torch.no_grad():
                program = torch.export.export(model, (), kwargs=inputs)
                got = _output(program.module()(**inputs))
                attempt.max_abs_error = float((got - reference).abs().max())

    def _train(
        self, ctx: CellContext, arch: str, size: Mapping[str, Any], model: nn.Module,
        inputs: dict[str, Any], compiled: bool,
    ) -> None:  # fmt: skip
        import torch

        losses = _curve(arch, size, inputs, torch.float32, ctx.device, compiled)
        truth = _curve(arch, size, inputs, torch.float64, torch.device("cpu"), False)
        ctx.loss_curve(losses, reference=truth)
        model.train()
        run: Callable[..., Any] = torch.compile(model) if compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss: torch.Tensor = run(**inputs).loss
            loss.backward()
            opt.step()
            return loss.detach()

        items = size["batch"] * (1 if arch == "vit" else size["seq"])
        ctx.measure(step, items_per_iter=items, unit=_unit(arch), compiled=compiled)
        ctx.metric("loss_first", losses[0])
        ctx.metric("loss_last", losses[-1])


def _unit(arch: str) -> str:
    return "images/s" if arch == "vit" else "tokens/s"


def _curve(
    arch: str, size: Mapping[str, Any], inputs: Mapping[str, Any], dtype: torch.dtype,
    device: torch.device, compiled: bool,
) -> list[float]:  # fmt: skip
    """Ten seeded AdamW steps on one batch from the same initial weights: the loss per step.
    Dropout is off (eval-mode layers, training gradients), so that the curve is a function of
    the weights and the pin, not of the dropout draws."""
    import torch

    model = _build(arch, size, "eager", dtype).to(device).eval()
    run: Callable[..., Any] = torch.compile(model) if compiled else model
    batch = _cast({k: v.to(device) for k, v in inputs.items()}, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))
    losses = []
    for _ in range(int(size["steps"])):
        opt.zero_grad(set_to_none=True)
        loss = run(**batch).loss
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses
