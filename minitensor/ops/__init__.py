"""The built-in ops: `Function` subclasses on numpy arrays, one file per family.

Users call them through `minitensor.functional` (and Tensor methods); the classes are public so
that a learner can read each op's forward and backward side by side.
"""
