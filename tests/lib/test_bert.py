"""lib.bert (our NumPy BERT, attention by lib.attention) against the reference BertModel of
`transformers`, built from the shipped config.json and loaded from the shipped safetensors.

Nothing here touches a model hub: the reference is constructed from the files in the model
package, and the hub is switched off before `transformers` is imported (by the tests that
use it, so that collecting this file stays quick).
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
from tolerances import RANDOM, WORST, assert_within, mha_errors, projection_errors

from lib import bert as B
from lib import head_types as HT
from lib import rounding as R

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
FD = R.FUNCTION_DEPTH
GELU_SLOPE = 1.13  # the largest |GELU'(x)| = Phi(x) + x phi(x), at x = sqrt(2): 1.1289


# --------------------------------------------------------------------------- error bounds
#
# Every comparison below uses a tolerance derived from an error model (tests/tolerances.py),
# carried through one encoder layer step by step: each function returns a value computed in
# float64 and the bound on its error when computed in ``dtype`` from inputs known to within
# the given errors. Layers are compared one at a time, each fed the reference's own input, so
# that no error is carried from layer to layer; that the forward is exactly the layers one
# after another is checked apart (check_layers_compose). The model is RANDOM (rounding
# errors independent, of mean zero): on these 384- and 1536-wide layers the worst case
# allows a float32 layer more error than the size of its outputs
# (test_the_worst_case_says_nothing_about_a_float32_layer).
ERRORS = RANDOM


def layer_norm_errors(dtype, r, dr, gamma, beta, eps, errors=ERRORS):
    """LayerNorm (two passes, as lib.bert and torch compute it) of r known to within dr:
    mean (d + 1 roundings), centring (1), variance (d + 2), + eps and sqrt (2), then
    (r - mean) / sd * gamma + beta (3); an error e in r - mean moves the output by
    |gamma| e / sd, an error e in sd by |gamma| |r - mean| e / sd^2."""
    d = r.shape[-1]
    dr = np.broadcast_to(dr, r.shape)
    mu = r.mean(axis=-1, keepdims=True)
    c = r - mu
    dmu = errors.add(
        errors.mean(dr), errors.rounding(dtype, d + 1, np.abs(r).mean(-1, keepdims=True))
    )
    dc = errors.add(dr, dmu, errors.rounding(dtype, 1, np.abs(r) + np.abs(mu)))
    var = (c * c).mean(axis=-1, keepdims=True)
    dvar = errors.add(2 * errors.mean(np.abs(c) * dc), errors.rounding(dtype, d + 2, var))
    sd = np.sqrt(var + eps)
    dsd = errors.add(dvar / (2 * sd), errors.rounding(dtype, 2, sd))
    gamma, beta = np.abs(gamma), np.asarray(beta)
    y = c / sd * gamma + beta
    dy = gamma * errors.add(dc / sd, np.abs(c) * dsd / sd**2)
    return y, errors.add(dy, errors.rounding(dtype, 3, np.abs(c / sd * gamma) + np.abs(beta)))


def gelu_errors(dtype, f, df, activation=B.gelu, errors=ERRORS):
    """GELU of f known to within df: its slope (at most GELU_SLOPE, for both forms) times
    df, and its own roundings on |f|: the erf form x (1 + erf(x / sqrt 2)) / 2, erf and 4
    products and sums; the tanh form, tanh and 8 products and sums, with the error of tanh's
    argument c (x + 0.044715 x^3) (5 roundings on its size) carried through x / 2."""
    if activation is B.gelu:
        return B.gelu(f), errors.add(GELU_SLOPE * df, errors.rounding(dtype, FD + 4, np.abs(f)))
    arg = math.sqrt(2 / math.pi) * np.abs(f) * (1 + 0.044715 * f**2)
    own = errors.add(
        errors.rounding(dtype, FD + 8, np.abs(f)), np.abs(f) / 2 * errors.rounding(dtype, 5, arg)
    )
    return B.gelu_tanh(f), errors.add(GELU_SLOPE * df, own)


def encoder_layer_errors(dtype, layer, x, dx, mask, eps, activation=B.gelu, errors=ERRORS):
    """(output, its error, attention weights, their error) of one computation in ``dtype`` of
    lib.bert.encoder_layer on x known to within dx: attention (mha_errors), the residual
    (one addition), LayerNorm, the feed-forward block (two projections around GELU), the
    residual and LayerNorm again."""
    w, dw, a, da = mha_errors(dtype, x, x, layer.attention, mask, dx_q=dx, dx_kv=dx, errors=errors)
    r = x + a
    dr = errors.add(dx, da, errors.rounding(dtype, 1, np.abs(x) + np.abs(a)))
    h, dh = layer_norm_errors(
        dtype, r, dr, layer.attn_norm_gamma, layer.attn_norm_beta, eps, errors
    )
    f, df = projection_errors(dtype, h, layer.W_in, layer.b_in, dh, errors)
    g, dg = gelu_errors(dtype, f, df, activation, errors)
    o, do = projection_errors(dtype, g, layer.W_out, layer.b_out, dg, errors)
    dr = errors.add(dh, do, errors.rounding(dtype, 1, np.abs(h) + np.abs(o)))
    out, dout = layer_norm_errors(
        dtype, h + o, dr, layer.out_norm_gamma, layer.out_norm_beta, eps, errors
    )
    return out, dout, w, dw


def embedding_errors(dtype, weights, ids, errors=ERRORS):
    """(embeddings, their error) of one computation in ``dtype`` of lib.bert.embed: three
    table rows added (2 roundings on the sum of their magnitudes), then LayerNorm."""
    w = weights
    parts = [np.asarray(t, np.float64) for t in (
        w.word_embeddings[ids], w.position_embeddings[: ids.shape[1]], w.token_type_embeddings[0]
    )]  # fmt: skip
    x = parts[0] + parts[1] + parts[2]
    dx = errors.rounding(dtype, 2, sum(np.abs(p) for p in parts))
    eps = w.config.layer_norm_eps
    return layer_norm_errors(dtype, x, dx, w.emb_norm_gamma, w.emb_norm_beta, eps, errors)


def input_error(dtype, x):
    """x rounded to ``dtype``: nothing in float64, u |x| in float32."""
    return 0.0 if dtype == np.float64 else R.tolerance(dtype, 1, np.abs(x)) / 2


def check_layer_by_layer(model, w64, batch, ref_hidden, ref_att, activation=B.gelu):
    """Each of lib's layers, fed the reference's input to that layer (rounded to the model's
    dtype), against the reference's output of it; the embeddings likewise. The tolerance is
    twice one layer's bound for the model's dtype: the reference's own error (in float64, or
    in the same dtype) is within that bound, which grows with u and with the input's error.
    ``w64``: the weights in float64, for the bounds."""
    dtype = model.weights.layers[0].W_in.dtype.type
    eps = model.config.layer_norm_eps
    key_mask = batch.attention_mask[:, None, None, :]
    _, d_emb = embedding_errors(dtype, w64, batch.input_ids)
    assert_within(B.embed(model.weights, batch.input_ids), ref_hidden[0], 2 * d_emb, "embeddings")
    for i, layer in enumerate(model.weights.layers):
        x = ref_hidden[i].astype(dtype)
        out, w = B.encoder_layer(layer, x, key_mask, eps, activation)
        assert out.dtype == w.dtype == dtype
        dx = input_error(dtype, ref_hidden[i])
        _, dout, _, dw = encoder_layer_errors(
            dtype, w64.layers[i], x.astype(np.float64), dx, key_mask, eps, activation
        )
        assert_within(out, ref_hidden[i + 1], 2 * dout, f"layer {i}")
        assert_within(w, ref_att[i], 2 * dw, f"layer {i}, weights")


def test_the_worst_case_says_nothing_about_a_float32_layer(model64):
    """Why the random model: the worst-case bound of one float32 layer exceeds its outputs,
    while the random model's is a small fraction of them."""
    batch, out = model64.run(SINGLE[:1])
    key_mask = batch.attention_mask[:, None, None, :]
    x, layer, eps = out.hidden_states[0], model64.weights.layers[0], model64.config.layer_norm_eps
    size = np.abs(out.hidden_states[1]).max()
    worst = encoder_layer_errors(np.float32, layer, x, 0.0, key_mask, eps, errors=WORST)[1]
    random = encoder_layer_errors(np.float32, layer, x, 0.0, key_mask, eps, errors=RANDOM)[1]
    assert worst.max() > size and random.max() < 1e-2 * size


def check_layers_compose(model, batch, out, activation=B.gelu):
    """bert_forward is exactly embed, then encoder_layer after encoder_layer."""
    key_mask = batch.attention_mask[:, None, None, :]
    eps = model.config.layer_norm_eps
    np.testing.assert_array_equal(out.hidden_states[0], B.embed(model.weights, batch.input_ids))
    for i, layer in enumerate(model.weights.layers):
        x, w = B.encoder_layer(layer, out.hidden_states[i], key_mask, eps, activation)
        np.testing.assert_array_equal(x, out.hidden_states[i + 1])
        np.testing.assert_array_equal(w, out.attentions[i])


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
    from transformers import BertConfig, BertModel

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


# --------------------------------------------------------------------------- the files


def test_shipped_files_and_checksum():
    folder = B.model_dir()
    for name in B.MODEL_FILES:
        assert (folder / name).is_file(), name
    assert B.sha256_of(folder / "model.safetensors") == B.MODEL_SHA256


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
    with pytest.raises(ValueError, match="refusing to load.*SHA-256") as info:
        B.load_weights(copy_path, folder / "config.json")
    assert B.MODEL_SHA256 in str(info.value)


def test_wrong_expected_checksum_is_refused(monkeypatch):
    monkeypatch.setattr(B, "MODEL_SHA256", "00" * 32)
    with pytest.raises(ValueError, match="published value is 00"):
        B.load_weights()


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
    for bad in ([], [1, 2], None, "a sentence, not a list"):
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
    n = batch.input_ids.shape[1]
    assert out.hidden_states.shape == (7, 1, n, 384)
    assert out.attentions.shape == (6, 1, 12, n, n)
    assert out.hidden_states.dtype == dtype
    check_layer_by_layer(model, model64.weights, batch, ref_hidden, ref_att)
    check_layers_compose(model, batch, out)


def test_float32_matches_float32_reference(model32, model64, reference):
    batch, out = model32.run(BATCH)
    ref_hidden, ref_att = run_reference(reference, np.float32, batch)
    check_layer_by_layer(model32, model64.weights, batch, ref_hidden, ref_att)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padded_batch_matches_reference(dtype, model32, model64, reference):
    model = model32 if dtype == np.float32 else model64
    batch, out = model.run(BATCH)
    assert len(set(batch.lengths.tolist())) == len(BATCH)  # all different lengths
    ref_hidden, ref_att = run_reference(reference, np.float64, batch)
    # all positions, padding included: padded queries still attend to the real keys
    check_layer_by_layer(model, model64.weights, batch, ref_hidden, ref_att)
    check_layers_compose(model, batch, out)
    # padding keys get exactly zero weight
    pad_keys = ~batch.attention_mask[None, :, None, None, :]
    assert np.all(np.where(pad_keys, out.attentions, 0.0) == 0.0)


def pooling_tolerance(dtype, last, mask, normalize):
    """Two computations of mean pooling in ``dtype`` (and of scaling to length 1): the mean
    of n real rows (n + 1 roundings on the mean of |rows|), then the length (d products and
    sums and a sqrt, each worth u of it: relative) and the division: the errors of the
    mean scaled by 1 / length, plus d + FD + 2 roundings on the result."""
    m = mask[..., None]
    count = m.sum(axis=1)
    mean = (last * m).sum(axis=1) / count
    d_mean = R.tolerance(dtype, int(count.max()) + 1, (np.abs(last) * m).sum(axis=1) / count) / 2
    if not normalize:
        return 2 * d_mean
    length = np.linalg.norm(mean, axis=-1, keepdims=True)
    unit = mean / length
    d_unit = 2 * d_mean / length + R.tolerance(dtype, last.shape[-1] + FD + 2, np.abs(unit)) / 2
    return 2 * d_unit


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pooled_embedding_matches_sentence_transformers_recipe(dtype, model32, model64, reference):
    """all-MiniLM-L6-v2's sentence embedding = mean over real tokens, then unit length
    (its modules.json: Transformer, Pooling(mean), Normalize), computed with torch from the
    reference's last hidden state (sentence-transformers is not installed), and by lib from
    the same numbers."""
    model = model32 if dtype == np.float32 else model64
    batch = model.tokenize(BATCH)
    with torch.no_grad():
        last = reference[dtype](
            input_ids=torch.tensor(batch.input_ids),
            attention_mask=torch.tensor(batch.attention_mask.astype(np.int64)),
        ).last_hidden_state
        mask = torch.tensor(batch.attention_mask, dtype=last.dtype).unsqueeze(-1)
        pooled = (last * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        expected = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    last = last.numpy()
    real = batch.attention_mask
    got = B.mean_pool(last, real, normalize=True)
    assert got.shape == (len(BATCH), 384) and got.dtype == dtype
    last64 = last.astype(np.float64)
    assert_within(got, expected, pooling_tolerance(dtype, last64, real, True), "normalised")
    # length 1: the unit vector's errors through the length, and its d + FD + 1 roundings
    unit_tol = pooling_tolerance(dtype, last64, real, True)
    length_tol = np.linalg.norm(unit_tol, axis=1) + R.tolerance(dtype, 384 + FD + 1)
    assert_within(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, length_tol, "length")
    # unnormalised mean pooling ignores padding
    raw = B.mean_pool(last, real)
    b = int(np.argmin(batch.lengths))
    n = int(batch.lengths[b])
    tol = pooling_tolerance(dtype, last64, real, False)[b]
    assert_within(raw[b], last64[b, :n].mean(axis=0), tol, "mean of the real rows")
    # the model's own embed(): its forward, then the same pooling
    _, out = model.run(BATCH)
    np.testing.assert_array_equal(
        model.embed(BATCH), B.mean_pool(out.last_hidden_state, real, True)
    )


def test_paraphrases_are_closer_than_unrelated_sentences(model32):
    e = model32.embed(
        ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell."]
    )
    sims = e @ e.T
    assert sims[0, 1] > sims[0, 2] + 0.3


# --------------------------------------------------------------------------- properties


# (dtype, sentence) -> each layer of the sentence alone: (input, output, weights, the bounds
# on both); the examples below repeat sentences, so each is computed once
ALONE = {}


def layers_alone(model, model64, sentence):
    dtype = model.weights.layers[0].W_in.dtype.type
    if (dtype, sentence) not in ALONE:
        ids = model.tokenize([sentence]).input_ids
        key_mask = np.ones((1, 1, 1, ids.shape[1]), bool)
        eps = model.config.layer_norm_eps
        states = B.bert_forward(model.weights, ids).hidden_states
        layers = []
        for i, layer in enumerate(model.weights.layers):
            x = states[i]
            out, w = B.encoder_layer(layer, x, key_mask, eps)
            x64 = x.astype(np.float64)
            _, dout, _, dw = encoder_layer_errors(
                dtype, model64.weights.layers[i], x64, 0.0, key_mask, eps
            )
            layers.append((x, out, w, dout, dw))
        ALONE[dtype, sentence] = layers
    return ALONE[dtype, sentence]


@settings(max_examples=6)  # every layer, padded, per example
@given(extra=st.integers(min_value=1, max_value=12), which=st.sampled_from(SINGLE))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padding_does_not_change_real_positions(model32, model64, dtype, extra, which):
    """Layer by layer: the sentence alone, and the same layer input padded with junk rows
    that the mask hides, give the same real positions, within the layer's bound (the real
    rows see the same numbers either way, so their bound is the same)."""
    model = model32 if dtype == np.float32 else model64
    eps = model.config.layer_norm_eps
    junk = np.random.default_rng(extra).normal(size=(1, extra, 384)).astype(dtype)
    for i, (x, a, w_a, dout, dw) in enumerate(layers_alone(model, model64, which)):
        n = x.shape[1]
        key_padded = (np.arange(n + extra) < n).reshape(1, 1, 1, -1)
        padded = np.concatenate([x, junk], axis=1)
        p, w_p = B.encoder_layer(model.weights.layers[i], padded, key_padded, eps)
        assert_within(p[:, :n], a, 2 * dout, f"layer {i}")
        assert_within(w_p[..., :n, :n], w_a, 2 * dw, f"layer {i}, weights")
        assert np.all(w_p[..., n:] == 0)


def test_one_dimensional_input_and_integer_mask(model32):
    batch = model32.tokenize(SINGLE[:1])
    a = B.bert_forward(model32.weights, batch.input_ids[0])
    b = B.bert_forward(model32.weights, batch.input_ids, batch.attention_mask.astype(np.int64))
    np.testing.assert_array_equal(a.hidden_states, b.hidden_states)


def test_gelu_is_the_exact_erf_form():
    x = np.linspace(-6, 6, 241)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    tol = 2 * gelu_errors(np.float64, x, 0.0)[1]
    assert_within(B.gelu(x), exact, tol)
    tanh_approx = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert (
        np.abs(B.gelu(x) - tanh_approx) > tol + gelu_errors(np.float64, x, 0.0, B.gelu_tanh)[1]
    ).any()
    assert B.gelu(np.float32(1.0)).dtype == np.float32


def test_gelu_tanh_is_torchs_tanh_approximation():
    x = np.linspace(-8, 8, 321)
    expected = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    assert_within(B.gelu_tanh(x), expected, 2 * gelu_errors(np.float64, x, 0.0, B.gelu_tanh)[1])
    assert B.gelu_tanh(np.ones(3, np.float32)).dtype == np.float32


def test_config_gelu_is_transformers_exact_gelu():
    """The model's config says hidden_act "gelu"; in transformers that is the erf form."""
    from transformers import BertConfig
    from transformers.activations import ACT2FN

    config = BertConfig.from_json_file(str(B.model_dir() / "config.json"))
    assert config.hidden_act == "gelu"
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    for name, ours in (("gelu", B.gelu), ("gelu_new", B.gelu_tanh)):
        tol = 2 * gelu_errors(np.float64, x.numpy(), 0.0, ours)[1]
        assert_within(ACT2FN[name](x).numpy(), ours(x.numpy()), tol, name)


def test_forward_with_gelu_tanh_matches_transformers_gelu_new(model64, reference):
    """bert_forward(activation=gelu_tanh) is the reference model with hidden_act "gelu_new"
    (the tanh approximation), and differs from the model's own (erf) layers by more than
    rounding can explain."""
    from transformers.activations import ACT2FN

    tanh_model = copy.deepcopy(reference[np.float64])
    for layer in tanh_model.encoder.layer:  # what BertIntermediate builds for "gelu_new"
        layer.intermediate.intermediate_act_fn = ACT2FN["gelu_new"]
    batch = model64.tokenize(BATCH)
    out = B.bert_forward(model64.weights, batch.input_ids, batch.attention_mask, B.gelu_tanh)
    ref_hidden, ref_att = run_reference({np.float64: tanh_model}, np.float64, batch)
    check_layer_by_layer(model64, model64.weights, batch, ref_hidden, ref_att,
                         activation=B.gelu_tanh)  # fmt: skip
    check_layers_compose(model64, batch, out, activation=B.gelu_tanh)
    # one layer tells the two apart
    key_mask = batch.attention_mask[:, None, None, :]
    eps = model64.config.layer_norm_eps
    layer, x = model64.weights.layers[0], out.hidden_states[0]
    bounds = [encoder_layer_errors(np.float64, layer, x, 0.0, key_mask, eps, f)[1]
              for f in (B.gelu, B.gelu_tanh)]  # fmt: skip
    exact = B.encoder_layer(layer, x, key_mask, eps)[0]
    tanh = B.encoder_layer(layer, x, key_mask, eps, B.gelu_tanh)[0]
    assert (np.abs(exact - tanh) > bounds[0] + bounds[1]).any()


def test_layer_norm():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(2, 5, 16))
    y = B.layer_norm(x, np.ones(16), np.zeros(16), 1e-12)
    _, dy = layer_norm_errors(np.float64, x, 0.0, np.ones(16), np.zeros(16), 1e-12)
    # the mean of y: its errors, and 17 roundings on mean |y|
    mean_tol = dy.mean(-1) + R.tolerance(np.float64, 17, np.abs(y).mean(-1)) / 2
    assert_within(y.mean(axis=-1), 0.0, mean_tol, "mean")
    # its variance, 1 up to eps / var: twice mean |y| dy, and 18 roundings on mean y^2;
    # and the true variance of y is var / (var + eps), 1 to within eps / var
    var_tol = 2 * (np.abs(y) * dy).mean(-1) + R.tolerance(np.float64, 18, (y * y).mean(-1)) / 2
    assert_within(y.var(axis=-1), 1.0, var_tol + 1e-12 / x.var(axis=-1), "variance")
    z = B.layer_norm(x, np.full(16, 2.0), np.full(16, 0.5), 1e-12)
    _, dz = layer_norm_errors(np.float64, x, 0.0, np.full(16, 2.0), np.full(16, 0.5), 1e-12)
    assert_within(z, 2 * y + 0.5, dz + 2 * dy + R.tolerance(np.float64, 2, 2 * np.abs(y) + 0.5) / 2)


# --------------------------------------------------------------------------- bad input


def test_token_ids_out_of_range(model32):
    w = model32.weights
    with pytest.raises(ValueError, match=r"must lie in \[0, 30522\), got 101 to 30522"):
        B.bert_forward(w, np.array([[101, 2000, 30522, 102]]))
    with pytest.raises(ValueError, match="got -1 to 102"):
        B.bert_forward(w, np.array([101, -1, 102]))


def test_token_ids_must_be_integers(model32):
    with pytest.raises(ValueError, match=r"must be integer token ids.*float64 of shape \(1, 2\)"):
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


def test_too_many_positions(model32):
    ids = np.full((1, 513), 1000)
    with pytest.raises(ValueError, match=r"n <= 512, got int64 of shape \(1, 513\)"):
        B.bert_forward(model32.weights, ids)
