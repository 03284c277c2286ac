"""training.sft scores only the labelled positions through TRL's fused LM head on a CPU (`_score_loss_positions_only`):
the loss and the gradients equal the plain cross-entropy over the full logits, and the head is fed only the
labelled rows."""

from __future__ import annotations

import torch

from training import sft


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


def test_the_fused_head_on_labelled_positions_gives_the_full_cross_entropy(monkeypatch):
    from trl.trainer import utils as trl_utils

    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)   # undone after the test
    ids = torch.randint(0, 300, (1, 40))
    labels = ids.clone()
    labels[:, :25] = -100                                  # a prompt, then the policy's turn
    labels[:, 31:34] = -100                                # and a second prompt part inside the episode

    ref = _model()
    logits = ref(input_ids=ids).logits[:, :-1]
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 300), labels[:, 1:].reshape(-1), ignore_index=-100)
    want.backward()
    want_grad = ref.model.layers[1].mlp.down_proj.weight.grad.clone()

    rows = []
    real_apply = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *args):
        rows.append(hidden.shape[0])
        return real_apply(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", spy)
    sft._score_loss_positions_only()
    model = _model()
    trl_utils.add_fused_lm_head(model)
    got = model(input_ids=ids, labels=labels, fused_lm_head=True).loss
    got.backward()

    assert rows == [int((labels[:, 1:] != -100).sum())]    # the labelled rows only, not all 39
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    assert torch.allclose(model.model.layers[1].mlp.down_proj.weight.grad, want_grad, atol=1e-5)
