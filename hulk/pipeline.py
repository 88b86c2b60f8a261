"""The step functions under the names the benchmark scripts call them by.

The steps live in `hulk.stages` (one module each; `hulk.steps.STEPS` says which function runs
which step) and the data folder's readers in `hulk.data_folder`. New code imports from there.
"""

from hulk.data_folder import load_frames
from hulk.stages.corpus import run as corpus
from hulk.stages.generate import run as generate
from hulk.stages.import_hulk import run as import_hulk

__all__ = ["corpus", "generate", "import_hulk", "load_frames"]
