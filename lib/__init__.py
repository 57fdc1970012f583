"""Helpers for the course "Multi-head attention, built from scratch in Python".

Import the module you need; each one belongs to the notebook that derives it:

- ``lib.lists``: attention on plain Python lists (notebook 01).
- ``lib.toy``: the toy vocabulary, sentence and weights of notebooks 01-03.
- ``lib.timing``: ``best_time``, the fastest of a few timings (notebook 02; 03 and 10).
- ``lib.rounding``: how far apart two correct floating-point computations can be, the
  tolerance every comparison uses (notebook 02).
- ``lib.attention``: NumPy softmax, masks, scaled dot-product attention, the layer's
  parameters (``MHAParams``, grouped key/value heads included) and multi-head attention as
  notebook 03 derives it (notebooks 02 and 03).
- ``lib.heads``: entropy, offset scores and similarity of heads (notebook 04).
- ``lib.plots``: heatmaps of heads, entropy bars, similarity matrices (notebook 04).
- ``lib.backprop``: forward with a cache, backward by hand, softmax backward, head mask
  (notebook 05).
- ``lib.tiny``: the tiny trainable model, its tasks, cross-entropy, Adam, training loop
  (notebooks 05 and 06).
- ``lib.pruning``: ablation and gradient head importance, iterative pruning, Spearman
  (notebook 06).
- ``lib.bert``: a pretrained BERT (all-MiniLM-L6-v2) run with lib's multi-head attention
  (notebook 07).
- ``lib.head_types``: head-type scores, labels and the coreference probe (notebook 07).
- ``lib.torch_bridge``: our weights and masks to and from ``torch.nn.MultiheadAttention``
  (notebook 08; the only module that imports torch).
- ``lib.positions``: the sinusoidal table and its shifts, RoPE (both pair layouts), ALiBi's
  slopes and bias (notebook 09).
- ``lib.blockwise``: exact attention in blocks, the online softmax, lib's cache-blocked
  kernel and the fast path, ``BW.multi_head_attention`` (notebook 10).
- ``lib.kv_cache``: a trained layer's key/value heads pooled into groups (GQA, MQA),
  decoding with a KV cache (notebook 10).
- ``lib.checks``: the checks that follow each exercise.
- ``lib.install``: what each notebook's set-up cell runs where the course is not installed
  (Google Colab); standard library only.

``import lib`` itself imports nothing else, so that ``lib.install`` works before NumPy or
anything else the course needs is installed.
"""
