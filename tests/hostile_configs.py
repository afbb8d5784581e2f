"""Hostile config texts shared by the check-config and the reload tests."""

# A YAML alias bomb: ten levels of ten aliases each (10^9 leaves when expanded).
BILLION_LAUGHS = "\n".join(
    ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
) + "\n"
