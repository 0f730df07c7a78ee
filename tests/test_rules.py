"""The shared rule helpers: three-valued checks, their combinator, and across-seed intervals that noise cannot pass."""

import math

import ml_collections
import numpy as np
import pytest
from scipy import stats

from normjax.report.claims import CONSTRUCTION, INCONCLUSIVE, NOT_TESTABLE
from normjax.report.rules import (
    Check,
    band_check,
    check,
    claim_verdict,
    combine,
    every,
    exponent_ci,
    mean_ci,
    power_note,
    seeds_needed,
    some,
)
from normjax.studies.seeds import seeds

S, C, I = Check.SUPPORTED, Check.CONTRADICTED, Check.INCONCLUSIVE


def test_combine_all_some_none():
    assert combine([True, True]) == "holds"
    assert combine([True, False]) == "partly holds"
    assert combine([False, False]) == "does not hold"
    with pytest.raises(ValueError, match="at least one check"):
        combine([])


@pytest.mark.parametrize(
    "checks, verdict",
    [
        ([S, S], "holds"),
        ([S, C], "partly holds"),
        ([S, C, I], "partly holds"),  # a real contradiction beside a real support
        ([C, C], "does not hold"),
        ([C, I], "does not hold"),
        ([I], INCONCLUSIVE),
        ([S, I], INCONCLUSIVE),  # an unresolved part never makes a claim 'partly' hold
        ([I, I, S, S], INCONCLUSIVE),
    ],
)
def test_three_valued_combinator(checks, verdict):
    assert combine(checks) == verdict


def test_kleene_and_or_not():
    for a in (S, C, I):
        assert a & S == a and a | C == a and (a & C) is C and (a | S) is S and ~~a is a
    assert (I & I) is I and (I | I) is I and ~I is I and ~S is C
    assert every([S, I, S]) is I and every([S, I, C]) is C and some([C, I]) is I and some([C, C]) is C
    assert check(True) is S and check(False) is C and check(I) is I
    assert bool(S) and not bool(I) and not bool(C)  # a two-valued reader sees 'passes' only when supported


def test_claim_verdict_combines_rows_across_studies():
    assert claim_verdict(["holds", "does not hold"]) == "partly holds"
    assert claim_verdict(["holds", CONSTRUCTION]) == "holds"
    assert claim_verdict([CONSTRUCTION, CONSTRUCTION]) == CONSTRUCTION
    assert claim_verdict(["holds", INCONCLUSIVE]) == INCONCLUSIVE
    assert claim_verdict(["partly holds", INCONCLUSIVE]) == "partly holds"
    assert claim_verdict(["does not hold", NOT_TESTABLE]) == "does not hold"  # a row that measured nothing adds nothing
    assert claim_verdict([NOT_TESTABLE]) == NOT_TESTABLE


def test_an_interval_that_straddles_its_threshold_is_inconclusive_not_a_failure():
    """D2's case: mean above the threshold, interval [-0.51, 1.34] across it: neither support nor contradiction."""
    noisy = mean_ci([-0.2, 0.35, 1.1])
    assert noisy.lo < 0.2 < noisy.hi
    assert noisy.above(0.2) is I and noisy.below(0.2) is I and noisy.within(0.1, 0.3) is I
    assert combine([noisy.above(0.2)]) == INCONCLUSIVE
    assert combine([noisy.above(0.2), mean_ci([2.0, 2.1, 2.2]).above(0.2)]) == INCONCLUSIVE
    assert mean_ci([2.0, 2.1, 2.2]).below(0.2) is C and mean_ci([2.0, 2.1, 2.2]).within(0.0, 1.0) is C


def test_a_band_narrower_than_the_interval_is_underpowered():
    """S2's premise: a [0.4, 0.6] band that 5 seeds of this spread cannot resolve is inconclusive, with the seed
    count that would resolve it; the count is where the t interval's width first drops below the band's."""
    est = mean_ci([0.40, 0.72, 0.55, 0.60, 0.50])
    assert est.within(0.4, 0.6) is I and est.underpowered(0.4, 0.6)
    n = seeds_needed(est, 0.4, 0.6)
    s = (est.hi - est.lo) * math.sqrt(est.n) / (2 * 2.7764451)  # t_{0.975, 4}
    assert n > est.n and "underpowered" in power_note("e", est, 0.4, 0.6)
    width = lambda m: 2 * stats.t.ppf(0.975, m - 1) * s / math.sqrt(m)  # noqa: E731
    assert width(n) < 0.2 <= width(n - 1)
    assert power_note("e", mean_ci([0.5, 0.51, 0.49]), 0.4, 0.6) == ""


def test_band_check_makes_an_unmeetable_band_inconclusive():
    """An interval wider than its band is inconclusive on either side (no outcome at this seed count could pass),
    with the seeds that would narrow it and, with the mean inside the band, those that would let it fit there."""
    outside = mean_ci([0.8, 1.0, 0.9])  # [0.65, 1.15]: above [0.4, 0.6], but wider than it
    assert outside.within(0.4, 0.6) is C and outside.underpowered(0.4, 0.6)
    found, note = band_check("e", outside, 0.4, 0.6)
    assert found is I and "underpowered" in note and "at this mean" not in note
    inside = mean_ci([0.40, 0.72, 0.55, 0.60, 0.50])  # mean 0.554: 0.046 from the band's edge
    found, note = band_check("e", inside, 0.4, 0.6)
    room = 0.6 - inside.mean
    assert found is I and f"about {seeds_needed(inside, inside.mean - room, inside.mean + room)} to fit" in note
    assert seeds_needed(inside, inside.mean - room, inside.mean + room) > seeds_needed(inside, 0.4, 0.6)
    assert band_check("e", mean_ci([0.5, 0.51, 0.49]), 0.4, 0.6) == (S, "")  # resolved: within() decides
    assert band_check("e", mean_ci([0.9, 0.91, 0.89]), 0.4, 0.6) == (C, "")


def test_exponent_ci_fits_one_power_law_per_seed():
    x = np.array([6.0, 12.0, 24.0, 48.0])
    est = exponent_ci((x, 3.0 * x**e) for e in (-0.5, -0.6, -0.4))
    ref = mean_ci([-0.5, -0.6, -0.4])
    assert est.n == 3 and (est.mean, est.lo, est.hi) == pytest.approx((ref.mean, ref.lo, ref.hi), abs=1e-12)


def test_mean_ci_is_the_student_t_interval():
    est = mean_ci([1.0, 2.0, 3.0])
    half = 4.302652730 * 1.0 / math.sqrt(3)  # t_{0.975, 2} (10 digits, from a t table) * sample std / sqrt(n)
    assert est.n == 3 and est.mean == pytest.approx(2.0)
    assert (est.lo, est.hi) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-9)


def test_a_noisy_measurement_whose_mean_passes_does_not_pass():
    """Mean 0.52 clears a 0.5 threshold, but its interval straddles it: neither above nor below."""
    noisy = mean_ci([0.2, 0.9, 0.46])
    assert noisy.mean > 0.5 and noisy.above(0.5) is I and noisy.below(0.5) is I
    clean = mean_ci([0.61, 0.62, 0.63])
    assert clean.above(0.5) and clean.within(0.55, 0.7) and not clean.within(0.62, 0.7)


def test_one_seed_or_non_finite_values_never_pass():
    one = mean_ci([0.9])
    assert one.n == 1 and math.isnan(one.lo) and one.above(0.0) is I and one.within(-1, 1) is I
    assert "1 seed, no interval" in one.text()
    assert mean_ci([np.nan, None, 1.0, 1.0]).n == 2  # nan and None are dropped, and the count says so
    dropped = mean_ci([np.nan, 5.0, 5.01])  # 3 seeds, one non-finite: 2 values left, too few to pass anything
    assert dropped.n == 2 and dropped.above(0.0) is I and dropped.within(4.0, 6.0) is I
    assert mean_ci([]).n == 0 and mean_ci([]).above(-math.inf) is I


def test_seeds_start_at_the_config_seed():
    assert seeds(ml_collections.ConfigDict({"seed": 4, "num_seeds": 3})) == [4, 5, 6]


def test_claim_verdict_combines_the_checks_of_its_rows_not_their_verdicts():
    """R5's shape: an init row contradicted on both checks, a trained row supported on one and straddling on the
    other. Over row verdicts ('does not hold' + 'inconclusive') that reads 'does not hold'; over the checks it is
    'partly holds' (some supported, some contradicted)."""
    init = {"verdict": "does not hold", "checks": ["contradicted", "contradicted"]}
    trained = {"verdict": INCONCLUSIVE, "checks": ["inconclusive", "supported"]}
    assert claim_verdict([init["verdict"], trained["verdict"]]) == "does not hold"
    assert claim_verdict([init, trained]) == "partly holds"


def test_every_claim_has_a_scope_and_a_contradiction_outside_it_is_not_reproduced():
    from normjax.report.claims import NOT_REPRODUCED, OUTSIDE, REGISTRY, SCOPES

    for claim in REGISTRY:
        assert claim.scope in SCOPES, claim.id
        assert bool(claim.outside) == (claim.scope == OUTSIDE), claim.id
        expected = NOT_REPRODUCED if claim.scope == OUTSIDE else "does not hold"
        assert claim.scoped("does not hold") == expected and claim.scoped("holds") == "holds"
