"""The translation study's plateau criterion: the best validation loss improved by less than 1 % over the last quarter
of the run."""

from fairseq_residual_tools.analysis.plateau import Plateau, best_until


def curve(losses, every=250):
    return [((i + 1) * every, loss) for i, loss in enumerate(losses)]


def test_best_until_is_the_lowest_loss_validated_at_or_before_an_update():
    points = curve([5.0, 4.0, 4.5, 3.9])
    assert best_until(points, 750) == 4.0 and best_until(points, 1000) == 3.9 and best_until(points, 100) is None


def test_a_run_still_gaining_one_percent_over_its_last_quarter_has_not_plateaued():
    rule = Plateau(min_updates=1000)
    falling = curve([6.0, 5.0, 4.6, 4.4, 4.3, 4.25, 4.2, 4.15])  # 2000: best at 1500 is 4.25, now 4.15 (2.4 % lower)
    assert not rule.holds_at(falling, 2000) and rule.reached(falling) is None


def test_a_run_whose_best_is_older_than_a_quarter_of_it_has_plateaued_at_that_validation():
    rule = Plateau(min_updates=1000)
    turned_up = curve([6.0, 5.0, 4.6, 4.4, 4.45, 4.5, 4.6, 4.7])  # best 4.4 at 1000; at 1500 best(1125) = 4.4
    assert rule.reached(turned_up) == 1500
    flat = curve(
        [6.0, 5.0, 4.8, 4.6, 4.59, 4.58]
    )  # at 1250 best(937.5) = 4.8; at 1500 best(1125) = 4.6, now 0.4 % lower
    assert rule.reached(flat) == 1500


def test_nothing_counts_before_the_minimum_number_of_updates():
    stuck = curve([7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0])
    assert Plateau(min_updates=2000).reached(stuck) == 2000
    assert Plateau(min_updates=250).reached(stuck) == 500  # at 250 nothing lies in its first three quarters
