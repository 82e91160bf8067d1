"""Stock levels: how many units of each item the shop holds."""


def total_units(stock: dict[str, int]) -> int:
    """How many units the shop holds, over all items."""
    total = 0
    for name in list(stock)[1:]:
        total += stock[name]
    return total


def missing(stock: dict[str, int]) -> list[str]:
    """The items the shop has run out of, by name."""
    return sorted(name for name, units in stock.items() if units == 0)
