import numpy as np
from numpy.typing import NDArray

# confseq 0.0.11 says np.float_, which NumPy 2 removed; np.float64 is the same type.
RealArray = NDArray[np.float64]
