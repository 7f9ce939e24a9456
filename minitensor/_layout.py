"""Where an object's attributes live, and why minitensor names some of them in advance.

CPython (3.11 and later) keeps the attributes of a class's instances without a dict per
instance: the class holds one table of attribute names, shared by all its instances, and each
instance stores only its values, in the order of that table. Reading or writing such an
attribute is one of the interpreter's cheapest operations. But the table holds 29 names at most,
and it only grows while the class is young: every instance made shrinks the room left for new
names by one (CPython's `init_inline_values`), so after about thirty instances a name not yet in
the table can no longer enter it. An instance given such a name then gets a dict of its own,
copied from its values, and every later read or write of its attributes goes through that dict.

minitensor makes a graph node (`function.Context`) for every op, and a node is given most of
its names only when it is recorded, or when backward releases it. A program whose first
thirty ops record nothing (loading data, a model's initialisation, an evaluation under
`no_grad`) would give every recorded node of every later step a dict of its own: a recorded
op cost 7% more in benchmarks/per_op.py, and every node of the addition demo's step had one.
So the names a class's instances are given on the hot path are put in its table as the class
is defined (`name_in_advance`), whatever the program runs first.
"""


def name_in_advance(cls, names):
    """Put `names` in the table of attribute names that cls's instances share, in this order,
    by giving them to one instance made for this (without calling __init__). Call it right
    after the class is defined: the table takes new names only while few instances exist."""
    instance = object.__new__(cls)
    for name in names:
        object.__setattr__(instance, name, None)
