# The two helpers of confseq 0.0.11's misc.py that predmix.py imports, copied unchanged in
# substance: the original module also holds plotting and multiprocessing helpers and annotates
# with np.float_, which NumPy 2 removed. MIT licence, see LICENSE.
import numpy as np


def get_running_intersection(l, u):
    return np.maximum.accumulate(l), np.minimum.accumulate(u)


def get_ci_seq(x, ci_fn, times, parallel=False):
    x = np.array(x)
    l = np.repeat(0.0, len(times))
    u = np.repeat(1.0, len(times))
    for i in np.arange(0, len(times)):
        time = times[i]
        x_t = x[0:time]
        l[i], u[i] = ci_fn(x_t)
    return l, u
