import pytest

from llmcalc.units import (
    UnitError,
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_int,
    fmt_pct,
    fmt_seconds,
    parse_count,
    parse_length,
    si,
)
from llmcalc.validate import nearest_batch_tokens


@pytest.mark.parametrize("text, value", [
    ("7B", 7e9), ("7G", 7e9), ("1.5T", 1.5e12), ("300k", 3e5), ("300K", 3e5), ("2e12", 2e12),
    ("125M", 1.25e8), (" 4 ", 4.0), ("1e3k", 1e6), (".5T", 5e11), (42, 42.0), (1.5e9, 1.5e9),
    # issue 14: suffixes forgive case where a count cannot mean anything else (m = million, not milli)
    ("15t", 15e12), ("1m", 1e6), ("7b", 7e9), ("2g", 2e9),
    # issue 41: binary suffixes say a power of two exactly (16Mi tokens = 2,048 sequences of 8,192)
    ("16Mi", 16 * 2**20), ("4Ki", 4096), ("1Gi", 2**30), ("2Ti", 2 * 2**40), ("0.5Mi", 2**19),
])
def test_parse_count(text, value):
    assert parse_count(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", ["1.5X", "", "B", "7 bn", "1.2.3", "seven", "7x", "--1"])
def test_parse_count_rejects_nonsense(text):
    with pytest.raises(UnitError, match="cannot read"):
        parse_count(text, "tokens")


@pytest.mark.parametrize("tokens, seq_len, used", [
    (16e6, 8192, 1953 * 8192), (16 * 2**20, 8192, 16 * 2**20), (1000, 4096, 4096), (5e6, 3000, 1667 * 3000),
    (4e6, 4096, 977 * 4096),  # 976.56 sequences: the nearer multiple above
])
def test_nearest_batch_tokens(tokens, seq_len, used):
    """Issue 41: a token count per step that is no multiple of the sequence length is answered at the nearest
    multiple (at least one sequence), with a note; an exact one passes with none."""
    got, note = nearest_batch_tokens(tokens, seq_len)
    assert got == used and got % seq_len == 0
    assert (note is None) == (tokens == used)


@pytest.mark.parametrize("text, value", [("4k", 4096), ("32k", 32768), ("128K", 131072), ("2048", 2048), (512, 512)])
def test_parse_length_uses_binary_k(text, value):
    assert parse_length(text) == value


def test_parse_length_rejects_fractions():
    with pytest.raises(UnitError):
        parse_length("1.5")


@pytest.mark.parametrize("value, text", [
    (6738415616, "6.74 G"), (124439808, "124 M"), (999_999, "1.00 M"), (4096, "4.10 k"), (12, "12.0"),
    (4.2e22, "42.0 Z"),
])
def test_si(value, text):
    assert si(value).strip() == text


def test_formatters_carry_units():
    assert fmt_count(6738415616) == "6.74 B"  # issue 41: counts in the ML convention (B = billion)
    assert fmt_flops(4.2e22) == "42.0 ZFLOP (4.20e22)"
    assert fmt_flops(1.58e14) == "158 TFLOP"
    assert fmt_bytes(2.25 * 2**30) == "2.25 GiB"
    assert fmt_bytes(128 * 2**10) == "128.00 KiB"
    assert fmt_bytes(3 * 2**30, "MiB") == "3072.00 MiB"
    assert fmt_int(6738415616) == "6,738,415,616"
    assert fmt_pct(-0.0052) == "-0.520 %"
    assert fmt_pct(4e-5) == "+0.00400 %"
    assert fmt_seconds(2.1 * 86400) == "2.1 days"
    assert fmt_seconds(0.0039) == "3.9 ms"


def test_counts_print_billions_as_b_unless_si_is_asked_for():
    """Issue 41: "70.6 B" as ML readers write it (Llama 3's "70B"); `--units si` keeps SI's G; FLOPs stay SI."""
    from llmcalc.units import count_label, count_prefixes, fmt_tokens, set_count_style

    try:
        assert (fmt_count(70_553_706_496), fmt_count(124_439_808), fmt_count(1.5e12)) == ("70.6 B", "124 M", "1.50 T")
        assert fmt_tokens(1.5e10) == "15 B tokens" and count_label("params") == "params (B = 10^9)"
        assert "B = 10^9 (billion)" in count_prefixes()
        set_count_style("si")
        assert fmt_count(70_553_706_496) == "70.6 G" and fmt_tokens(1.5e10) == "15 G tokens"
        assert count_label("params") == "params (SI)" and "G = 10^9" in count_prefixes()
        assert fmt_flops(7e10) == "70.0 GFLOP"
        with pytest.raises(UnitError, match="--units"):
            set_count_style("metric")
    finally:
        set_count_style("ml")


@pytest.mark.parametrize("text, gib", [("24GB", 24), ("24 GB", 24), ("80G", 80), ("48GiB", 48), ("24", 24),
                                       ("24gb", 24), (" 141GB ", 141), ("0.5TB", 512)])
def test_card_memory_reads_a_cards_gb_as_binary(text, gib):
    """Issue 41: `--gpu-memory 24GB`: a card's GB is binary (24 GB of GDDR6X = 24 x 2^30 bytes; presets: memory_gib)."""
    from llmcalc.units import parse_card_memory

    assert parse_card_memory(text) == gib * 2**30


@pytest.mark.parametrize("text", ["24XB", "", "GB", "-8GB", "0GB", "nanGB"])
def test_card_memory_refuses_what_is_no_size(text):
    from llmcalc.units import parse_card_memory

    with pytest.raises(UnitError, match="24GB"):
        parse_card_memory(text)
