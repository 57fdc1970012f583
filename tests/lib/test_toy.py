"""lib/toy.py's ``head_weights``: each head's own projections are its block of columns of the
model's wide W_q, W_k and W_v, and side by side they give those matrices back."""

import pytest

from lib import lists as L
from lib import toy


def test_the_heads_own_projections_side_by_side_are_the_wide_matrices():
    model = toy.make_toy_model()
    heads = [toy.head_weights(model, h) for h in range(model.n_heads)]
    d_k = toy.D_MODEL // model.n_heads
    for role, wide in enumerate((model.W_q, model.W_k, model.W_v)):
        assert all(L.shape(head[role]) == (toy.D_MODEL, d_k) for head in heads)
        assert L.concat_columns([head[role] for head in heads]) == wide


@pytest.mark.parametrize(
    ("h", "message"),
    [(2, "the toy model has heads 0 to 1, not 2"), (-1, "h must be an integer >= 0, got -1")]
    + [(h, "h must be an integer >= 0, got") for h in (0.0, "0", True)],
)
def test_a_head_the_model_does_not_have_is_refused(h, message):
    with pytest.raises(ValueError, match=message):
        toy.head_weights(toy.make_toy_model(), h)
