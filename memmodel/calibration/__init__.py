"""From a calibration run to a hardware profile, on any machine (no GPU, no torch).

``memmodel calibrate`` measures on a GPU (:mod:`memmodel.gpu.calibrate`); everything that
does not need one lives here:

* :mod:`.plan`: what is measured, at which sizes and on which reference shapes, and the
  knee of the L2 capacity curve;
* :mod:`.figures`: the figures a run's measurements give, as the profile writes them and as
  ``memmodel calibrate`` shows them (one table for both);
* :mod:`.fits`: the implementation figures that are ratios of the model to the measured
  (efficiency, CTA overhead, diagonal cost, split-KV rates, backward and dropout rates);
* :mod:`.profile`: the profile writer (YAML, checked by the loader ``--gpu FILE`` uses).
"""
