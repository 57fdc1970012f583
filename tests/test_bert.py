"""lib.bert (our NumPy BERT, attention by lib.attention) against the reference BertModel of
`transformers`, built from the shipped config.json and loaded from the shipped safetensors.

Nothing here touches a model hub: the reference is constructed from the files in the model
package, and the hub is switched off before `transformers` is imported.
"""

import copy
import math
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from transformers import BertConfig, BertModel

from lib import bert as B
from lib import head_types as HT

SINGLE = [
    "The cat sat on the mat because it was tired.",
    "Hello!",
    "The doctor said that she would help the patient, and then she left the room quickly.",
]
BATCH = [
    "A small boat drifted slowly across the quiet lake.",
    "Why?",
    "After dinner, we walked along the river and talked about the future of the village.",
    "The dog barked at the postman.",
]
# The tolerances the course promises: hidden states 1e-4, attention weights 1e-5. They hold
# with a wide margin in float64. In float32 the hidden states (values up to about 10) carry
# rounding errors of that size in any implementation: PyTorch's own float32 run differs from
# its float64 run by about 1e-4. So float32 results must be within the promised tolerances or
# within twice PyTorch's own float32 error, whichever is larger.
HIDDEN_TOL = 1e-4
ATTENTION_TOL = 1e-5


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def model32():
    return B.load_minilm(np.float32)


@pytest.fixture(scope="module")
def model64():
    return B.load_minilm(np.float64)


@pytest.fixture(scope="module")
def reference():
    """transformers' BertModel with eager attention, in float32 and float64."""
    folder = B.model_dir()
    config = BertConfig.from_json_file(str(folder / "config.json"))
    model = BertModel(config, add_pooling_layer=False)
    model.set_attn_implementation("eager")
    result = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    assert result.missing_keys == []
    assert {k.split(".")[0] for k in result.unexpected_keys} <= {"pooler", "embeddings"}
    assert all("position_ids" in k for k in result.unexpected_keys if k.startswith("emb"))
    model.eval()
    assert model.config._attn_implementation == "eager"
    return {np.float32: model, np.float64: copy.deepcopy(model).double()}


def run_reference(reference, dtype, batch: B.Batch):
    with torch.no_grad():
        out = reference[dtype](
            input_ids=torch.tensor(batch.input_ids),
            attention_mask=torch.tensor(batch.attention_mask.astype(np.int64)),
            output_hidden_states=True,
            output_attentions=True,
        )
    hidden = np.stack([h.numpy() for h in out.hidden_states])  # (layers + 1, batch, n, d)
    attentions = np.stack([a.numpy() for a in out.attentions])  # (layers, batch, heads, n, n)
    return hidden, attentions


def tolerances(reference, batch: B.Batch, dtype) -> tuple[float, float]:
    """(hidden, attention) tolerances for results computed in ``dtype``."""
    if dtype == np.float64:
        return HIDDEN_TOL, ATTENTION_TOL
    h32, a32 = run_reference(reference, np.float32, batch)
    h64, a64 = run_reference(reference, np.float64, batch)
    return max(HIDDEN_TOL, 2 * max_diff(h32, h64)), max(ATTENTION_TOL, 2 * max_diff(a32, a64))


def max_diff(a, b) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


# --------------------------------------------------------------------------- the files


def test_shipped_files_and_checksum():
    folder = B.model_dir()
    for name in B.MODEL_FILES:
        assert (folder / name).is_file(), name
    assert B.sha256_of(folder / "model.safetensors") == B.MODEL_SHA256
    B.verify_weights(folder / "model.safetensors")  # no error


def test_tampered_weights_are_refused(tmp_path):
    folder = B.model_dir()
    copy_path = tmp_path / "model.safetensors"
    shutil.copyfile(folder / "model.safetensors", copy_path)
    weights = B.load_weights(copy_path, folder / "config.json")  # an intact copy loads
    assert weights.config.n_layers == 6
    with open(copy_path, "r+b") as f:  # flip one byte in the middle of the tensors
        f.seek(copy_path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(B.ModelIntegrityError, match="refusing to load.*SHA-256") as info:
        B.load_weights(copy_path, folder / "config.json")
    assert B.MODEL_SHA256 in str(info.value)
    assert isinstance(info.value, ValueError)


def test_wrong_expected_checksum_is_refused():
    with pytest.raises(B.ModelIntegrityError, match="published value is 00"):
        B.verify_weights(B.model_dir() / "model.safetensors", "00" * 32)


def test_config_and_parameter_count(model32):
    c = model32.config
    assert (c.n_layers, c.n_heads, c.d_model, c.d_ff, c.vocab_size) == (6, 12, 384, 1536, 30522)
    # embeddings + 6 x (attention 4d^2+4d, two LayerNorms, FFN)
    d, f = 384, 1536
    per_layer = 4 * d * d + 4 * d + 2 * 2 * d + d * f + f + f * d + d
    expected = (30522 + 512 + 2) * d + 2 * d + 6 * per_layer
    assert model32.weights.count_params() == expected
    assert model32.weights.layers[0].attention.W_q.dtype == np.float32


def test_weights_are_transposed_to_row_vector_convention(model32):
    tensors = load_file(str(B.model_dir() / "model.safetensors"))
    torch_w = tensors["encoder.layer.0.intermediate.dense.weight"].numpy()  # (d_ff, d_model)
    assert model32.weights.layers[0].W_in.shape == (384, 1536)
    np.testing.assert_array_equal(model32.weights.layers[0].W_in, torch_w.T)


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_does_not_pad_or_truncate_to_128(model32):
    batch = model32.tokenize(["Hello world."])
    assert batch.tokens == [["[CLS]", "hello", "world", ".", "[SEP]"]]
    assert batch.input_ids.shape == (1, 5)
    long = " ".join(["word"] * 200)
    batch = model32.tokenize([long, "Short."])
    assert batch.input_ids.shape == (2, 202)  # neither cut to 128 nor padded to 128
    assert batch.lengths.tolist() == [202, 4]
    assert batch.input_ids[1, 4:].tolist() == [0] * 198  # [PAD] = 0
    assert not batch.attention_mask[1, 4:].any()


def test_tokenizer_refuses_too_long_sentences(model32):
    with pytest.raises(ValueError, match="sentence 1 has 602 tokens.*512 positions"):
        model32.tokenize(["fine", " ".join(["word"] * 600)])


def test_tokenize_bad_input(model32):
    for bad in ([], [1, 2], None):
        with pytest.raises(ValueError, match="non-empty list of strings"):
            model32.tokenize(bad)


def test_probe_data_is_well_formed(model32):
    data = HT.load_probe_sentences()
    assert len(data["sentences"]) >= 20
    items = data["coreference"]
    assert len(items) >= 12
    for item in items:
        tokens = model32.tokenize([item["text"]]).tokens[0]
        for key in ("pronoun", "antecedent", "distractor"):
            assert tokens.count(item[key]) == 1, (item, key)
    # each Winograd-style pair flips the answer, so position alone scores 50 %
    pairs = [i for i in items if i["cue"] == "world knowledge"]
    assert len(pairs) % 2 == 0
    for a, b in zip(pairs[::2], pairs[1::2], strict=True):
        assert (a["antecedent"], a["distractor"]) == (b["distractor"], b["antecedent"])


# --------------------------------------------------------------------------- reference


@pytest.mark.parametrize("sentence", SINGLE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_single_sentence_matches_reference(sentence, dtype, model32, model64, reference):
    model = model32 if dtype == np.float32 else model64
    batch, out = model.run([sentence])
    ref_hidden, ref_att = run_reference(reference, np.float64, batch)
    hidden_tol, attention_tol = tolerances(reference, batch, dtype)
    n = batch.input_ids.shape[1]
    assert out.hidden_states.shape == (7, 1, n, 384)
    assert out.attentions.shape == (6, 1, 12, n, n)
    assert out.hidden_states.dtype == dtype
    # every layer, against the float64 reference
    for layer in range(7):
        assert max_diff(out.hidden_states[layer], ref_hidden[layer]) < hidden_tol, layer
    assert max_diff(out.attentions, ref_att) < attention_tol
    if dtype == np.float64:  # same precision, same computation: equal to rounding
        assert max_diff(out.hidden_states, ref_hidden) < 1e-9
        assert max_diff(out.attentions, ref_att) < 1e-12


def test_float32_matches_float32_reference(model32, reference):
    batch, out = model32.run(BATCH)
    ref_hidden, ref_att = run_reference(reference, np.float32, batch)
    hidden_tol, attention_tol = tolerances(reference, batch, np.float32)
    assert max_diff(out.hidden_states, ref_hidden) < hidden_tol
    assert max_diff(out.attentions, ref_att) < attention_tol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padded_batch_matches_reference(dtype, model32, model64, reference):
    model = model32 if dtype == np.float32 else model64
    batch, out = model.run(BATCH)
    assert len(set(batch.lengths.tolist())) == len(BATCH)  # all different lengths
    ref_hidden, ref_att = run_reference(reference, np.float64, batch)
    hidden_tol, attention_tol = tolerances(reference, batch, dtype)
    # all positions, padding included: padded queries still attend to the real keys
    for layer in range(7):
        assert max_diff(out.hidden_states[layer], ref_hidden[layer]) < hidden_tol, layer
    assert max_diff(out.attentions, ref_att) < attention_tol
    if dtype == np.float64:
        assert max_diff(out.hidden_states, ref_hidden) < 1e-9
    # padding keys get exactly zero weight
    pad_keys = ~batch.attention_mask[None, :, None, None, :]
    assert np.all(np.where(pad_keys, out.attentions, 0.0) == 0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pooled_embedding_matches_sentence_transformers_recipe(dtype, model32, model64, reference):
    """all-MiniLM-L6-v2's sentence embedding = mean over real tokens, then unit length
    (its modules.json: Transformer, Pooling(mean), Normalize), computed here from the
    reference's last hidden state with torch (sentence-transformers is not installed)."""
    model = model32 if dtype == np.float32 else model64
    batch, out = model.run(BATCH)
    with torch.no_grad():
        last = reference[dtype](
            input_ids=torch.tensor(batch.input_ids),
            attention_mask=torch.tensor(batch.attention_mask.astype(np.int64)),
        ).last_hidden_state
        mask = torch.tensor(batch.attention_mask, dtype=last.dtype).unsqueeze(-1)
        pooled = (last * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        expected = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    got = B.mean_pool(out.last_hidden_state, batch.attention_mask, normalize=True)
    assert got.shape == (len(BATCH), 384)
    assert max_diff(got, expected) < 1e-5
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(model.embed(BATCH), got, rtol=0, atol=1e-12)
    # unnormalised mean pooling ignores padding
    raw = B.mean_pool(out.last_hidden_state, batch.attention_mask)
    b = int(np.argmin(batch.lengths))
    n = int(batch.lengths[b])
    np.testing.assert_allclose(raw[b], out.last_hidden_state[b, :n].mean(axis=0), rtol=1e-5)


def test_paraphrases_are_closer_than_unrelated_sentences(model32):
    e = model32.embed(
        ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell."]
    )
    sims = e @ e.T
    assert sims[0, 1] > sims[0, 2] + 0.3


# --------------------------------------------------------------------------- properties


@settings(max_examples=15)  # two forward passes per example
@given(extra=st.integers(min_value=1, max_value=12), which=st.sampled_from(SINGLE))
def test_padding_does_not_change_real_positions(model32, extra, which):
    alone = model32.tokenize([which])
    n = alone.input_ids.shape[1]
    ids = np.concatenate([alone.input_ids, np.zeros((1, extra), np.int64)], axis=1)
    mask = np.concatenate([alone.attention_mask, np.zeros((1, extra), bool)], axis=1)
    a = B.bert_forward(model32.weights, alone.input_ids, alone.attention_mask)
    p = B.bert_forward(model32.weights, ids, mask)
    np.testing.assert_allclose(p.hidden_states[:, :, :n], a.hidden_states, atol=2e-5)
    np.testing.assert_allclose(p.attentions[..., :n, :n], a.attentions, atol=1e-6)
    assert np.all(p.attentions[..., n:] == 0)


def test_one_dimensional_input_and_integer_mask(model32):
    batch = model32.tokenize(SINGLE[:1])
    a = B.bert_forward(model32.weights, batch.input_ids[0])
    b = B.bert_forward(model32.weights, batch.input_ids, batch.attention_mask.astype(np.int64))
    np.testing.assert_array_equal(a.hidden_states, b.hidden_states)


def test_gelu_is_the_exact_erf_form():
    x = np.linspace(-6, 6, 241)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(B.gelu(x), exact, rtol=0, atol=1e-15)
    tanh_approx = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert np.abs(B.gelu(x) - tanh_approx).max() > 1e-4  # not the approximation
    assert B.gelu(np.float32(1.0)).dtype == np.float32


def test_gelu_tanh_is_torchs_tanh_approximation():
    x = np.linspace(-8, 8, 321)
    expected = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    np.testing.assert_allclose(B.gelu_tanh(x), expected, rtol=0, atol=1e-14)
    assert B.gelu_tanh(np.ones(3, np.float32)).dtype == np.float32


def test_config_gelu_is_transformers_exact_gelu():
    """The model's config says hidden_act "gelu"; in transformers that is the erf form."""
    from transformers.activations import ACT2FN

    config = BertConfig.from_json_file(str(B.model_dir() / "config.json"))
    assert config.hidden_act == "gelu"
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    np.testing.assert_allclose(ACT2FN["gelu"](x).numpy(), B.gelu(x.numpy()), rtol=0, atol=1e-15)
    np.testing.assert_allclose(
        ACT2FN["gelu_new"](x).numpy(), B.gelu_tanh(x.numpy()), rtol=0, atol=1e-14
    )


def test_forward_with_gelu_tanh_matches_transformers_gelu_new(model64, reference):
    """bert_forward(activation=gelu_tanh) is the reference model with hidden_act "gelu_new"
    (the tanh approximation), and differs visibly from the model's own (erf) forward."""
    from transformers.activations import ACT2FN

    tanh_model = copy.deepcopy(reference[np.float64])
    for layer in tanh_model.encoder.layer:  # what BertIntermediate builds for "gelu_new"
        layer.intermediate.intermediate_act_fn = ACT2FN["gelu_new"]
    batch = model64.tokenize(BATCH)
    out = B.bert_forward(model64.weights, batch.input_ids, batch.attention_mask, None, B.gelu_tanh)
    with torch.no_grad():
        ref = tanh_model(
            input_ids=torch.tensor(batch.input_ids),
            attention_mask=torch.tensor(batch.attention_mask.astype(np.int64)),
            output_hidden_states=True,
        )
    ref_hidden = np.stack([h.numpy() for h in ref.hidden_states])
    assert max_diff(out.hidden_states, ref_hidden) < 1e-9
    exact = B.bert_forward(model64.weights, batch.input_ids, batch.attention_mask)
    real = batch.attention_mask
    assert max_diff(exact.hidden_states[-1][real], out.hidden_states[-1][real]) > 1e-4


def test_forward_refuses_an_unknown_activation(model32):
    with pytest.raises(ValueError, match="activation must be lib.bert.gelu"):
        B.bert_forward(model32.weights, np.array([[101, 102]]), activation=np.tanh)


def test_layer_norm():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(2, 5, 16))
    y = B.layer_norm(x, np.ones(16), np.zeros(16), 1e-12)
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, atol=1e-9)
    z = B.layer_norm(x, np.full(16, 2.0), np.full(16, 0.5), 1e-12)
    np.testing.assert_allclose(z, 2 * y + 0.5, atol=1e-12)


# --------------------------------------------------------------------------- bad input


def test_token_ids_out_of_range(model32):
    w = model32.weights
    with pytest.raises(ValueError, match=r"token id 30522 at position \(0, 2\).*\[0, 30522\)"):
        B.bert_forward(w, np.array([[101, 2000, 30522, 102]]))
    with pytest.raises(ValueError, match="token id -1"):
        B.bert_forward(w, np.array([101, -1, 102]))


def test_token_ids_must_be_integers(model32):
    with pytest.raises(ValueError, match="must be integers.*float64"):
        B.bert_forward(model32.weights, np.array([[101.0, 102.0]]))
    with pytest.raises(ValueError, match=r"\(batch, n\) or \(n,\)"):
        B.bert_forward(model32.weights, np.zeros((1, 2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"\(batch, n\) or \(n,\)"):
        B.bert_forward(model32.weights, np.zeros((1, 0), dtype=np.int64))


def test_mask_shape_mismatch(model32):
    ids = np.array([[101, 2000, 102], [101, 2001, 102]])
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\).*\(2, 3\)"):
        B.bert_forward(model32.weights, ids, np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3,\)"):
        B.bert_forward(model32.weights, ids, np.ones(3, bool))


def test_mask_values(model32):
    ids = np.array([[101, 2000, 102]])
    with pytest.raises(ValueError, match="boolean or 0/1"):
        B.bert_forward(model32.weights, ids, np.array([[1, 2, 1]]))
    with pytest.raises(ValueError, match="boolean or 0/1"):
        B.bert_forward(model32.weights, ids, np.array([[1.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="row 1 has no real token"):
        B.bert_forward(model32.weights, np.vstack([ids, ids]), np.array([[1, 1, 1], [0, 0, 0]]))


def test_too_many_positions(model32):
    ids = np.full((1, 513), 1000)
    with pytest.raises(ValueError, match="513 tokens.*only 512 positions"):
        B.bert_forward(model32.weights, ids)


def test_token_type_ids(model32):
    ids = np.array([[101, 2000, 102]])
    with pytest.raises(ValueError, match=r"token_type_ids must lie in \[0, 2\)"):
        B.bert_forward(model32.weights, ids, token_type_ids=np.array([[0, 2, 0]]))
    with pytest.raises(ValueError, match="shaped like input_ids"):
        B.bert_forward(model32.weights, ids, token_type_ids=np.array([[0, 0]]))
    default = B.bert_forward(model32.weights, ids)
    zeros = B.bert_forward(model32.weights, ids, token_type_ids=np.zeros((1, 3), np.int64))
    np.testing.assert_array_equal(default.hidden_states, zeros.hidden_states)


def test_mean_pool_bad_shapes():
    with pytest.raises(ValueError, match=r"\(batch, n, d\).*\(2, 3, 4\) and \(2, 4\)"):
        B.mean_pool(np.zeros((2, 3, 4)), np.ones((2, 4), bool))


def test_load_weights_bad_dtype():
    with pytest.raises(ValueError, match="float32 or float64, got float16"):
        B.load_weights(dtype=np.float16)
