"""The built-in ops: `Function` subclasses on numpy arrays, one file per family.

After each class comes the public function that applies it (`ops.elementwise.exp` after `Exp`),
which checks its arguments once; `minitensor.functional` re-exports them all, and Tensor
methods call them. The classes are public so that a learner reads each op's forward and
backward, and the function a user calls, side by side.
"""
