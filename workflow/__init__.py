"""The end-to-end journeys: the demo's stages, its simulation study and the HTML report.

They use the libraries (realrun through its command line, calibrate, sim) and know no
command line of their own: ``ddplab`` parses the user's arguments and calls in here.
Arrows point one way: ddplab -> workflow -> {calibrate, sim, realrun} (docs/architecture.md).
"""
