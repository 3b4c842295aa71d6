"""sinpe.torch.diffusers: sinpe's exact positional values inside diffusers models and
pipelines, the diffusers adapter of ``sinpe.torch.patch``.

``_adapter`` finds a diffusers model's positional modules (timestep embeddings, rotary
modules of every form, Fourier projections, modules holding sin-cos tables) and the
positional functions its code and a pipeline's code call, by what their code does, and
plans sinpe's stand-ins; ``_rebuild`` makes a positional module again on the CPU with
exact tables.  They stand on :mod:`sinpe.torch.patching` (the handle, the checks, the
exact kept calls); nothing here imports diffusers: its code is reached through the
model's and the pipeline's own classes.
"""
