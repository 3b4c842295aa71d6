"""sinpe.torch.patching: what ``sinpe.torch.patch`` shares between libraries.

The handle (:class:`Patch`) and the plan it applies (``_handle``), where a model keeps
its positional code (``_discover``: no list of models), the apply forms (:data:`FORMS`,
``_forms``) and the probes they are held on (``_probes``), the checks of functions and
tables (``_checks``), and the double-precision fallback for modules sinpe's own cannot
stand in for (``_double``).  Each library's adapter (:mod:`sinpe.torch.hf`,
:mod:`sinpe.torch.diffusers`) stands on these; nothing here imports an adapter or a
library.
"""

from sinpe.torch.patching._forms import FORMS
from sinpe.torch.patching._handle import Patch

__all__ = ["FORMS", "Patch"]
