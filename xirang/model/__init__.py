"""What a model family's module uses: parameter init, sampling, document masks, block
parallelisation helpers and the model shape the planner reads.

The names in ``__all__`` are the stable surface for model plugins (see "Writing a model family"
in CONTRIBUTING.md). Importing this module imports torch.
"""

from xirang.model.layers import keep_stage_layers, parallelize_blocks
from xirang.model.sampling import sample
from xirang.model.stages import keep_layers, keep_stage
from xirang_core.checkpoint.pretrained import hf_config_file
from xirang_core.data import document_mask
from xirang_core.parallel.plan import ModelShape
from xirang_core.train.init import init_parameters

__all__ = [
    "ModelShape",
    "document_mask",
    "hf_config_file",
    "init_parameters",
    "keep_layers",
    "keep_stage",
    "keep_stage_layers",
    "parallelize_blocks",
    "sample",
]
