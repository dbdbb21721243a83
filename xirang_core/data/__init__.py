"""Data as the run reads it: the dataset protocol (``interface``), token batches, the step
loader and prefetch. The snapshot pipeline behind ``data=`` is the plugin ``xirang_data``."""
