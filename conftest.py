"""Root pytest configuration, loaded for the library tests and the notebooks alike.

The notebook kernels that nbval and the tests start inherit this process's environment. A
MPLBACKEND set in the shell (or by a library) would make them draw nowhere instead of
inline, and every stored figure would go missing, so it is removed here.
"""

import os

os.environ.pop("MPLBACKEND", None)
