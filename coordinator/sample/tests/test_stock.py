from shop.stock import missing, total_units


def test_total_units() -> None:
    assert total_units({"apples": 3, "pears": 2}) == 5
    assert total_units({}) == 0


def test_missing() -> None:
    assert missing({"apples": 0, "pears": 2, "figs": 0}) == ["apples", "figs"]
