"""ArchConfig validation: bad values are rejected with a message naming the field."""

import pytest
from pydantic import ValidationError

from search_spaces.residual_lm import ArchConfig, config_error_message, flavour

BAD_VALUES = [
    ({"d_model": 100, "n_heads": 3}, "n_heads"),
    ({"d_model": 96, "n_heads": 32}, "even"),  # head_dim 3 cannot be rotated by RoPE
    ({"ancre_tau": 0.0}, "ancre_tau"),
    ({"ancre_tau": -1.0}, "ancre_tau"),
    ({"mod_rate": 0.9}, "mod_rate"),
    ({"mod_rate": -0.1}, "mod_rate"),
    ({"residual": "highway"}, "residual"),
    ({"n_layers": 0}, "n_layers"),
    ({"mod_every": 0}, "mod_every"),
    ({"n_layers": 3, "mod_rate": 0.5, "mod_every": 4}, "mod_every"),  # would silently route nothing
    ({"n_layers": 1, "mod_rate": 0.5}, "n_layers"),  # block 1 is never routed
    ({"vocab_size": 1}, "vocab_size"),
    ({"colour": "blue"}, "colour"),
]


@pytest.mark.parametrize("override, field", BAD_VALUES)
def test_bad_values_are_rejected_naming_the_field(override, field):
    with pytest.raises(ValidationError) as info:
        ArchConfig(**override)
    message = config_error_message(info.value)
    assert field in message
    assert "\n" not in message


def test_message_states_the_accepted_range():
    with pytest.raises(ValidationError) as info:
        ArchConfig(mod_rate=0.95)
    assert config_error_message(info.value) == "mod_rate: Input should be less than 0.9 (got 0.95)"


def test_validation_error_is_a_value_error():
    with pytest.raises(ValueError):
        ArchConfig(n_layers=-3)


def test_routed_blocks_skip_the_first_block():
    assert ArchConfig(n_layers=6, mod_rate=0.25, mod_every=1).routed_blocks == [2, 3, 4, 5, 6]
    assert ArchConfig(n_layers=6, mod_rate=0.25, mod_every=2).routed_blocks == [2, 4, 6]
    assert ArchConfig(n_layers=6, mod_rate=0.25, mod_every=3).routed_blocks == [3, 6]
    assert ArchConfig(n_layers=6, mod_rate=0.0).routed_blocks == []


def test_flavour_overrides_are_validated():
    assert flavour("debug", residual="nag").residual == "nag"
    with pytest.raises(ValidationError):
        flavour("debug", mod_rate=2.0)
    with pytest.raises(ValueError, match="flavour"):
        flavour("nonexistent")
