"""Timed, budgeted probes: the only code in llmdoctor that talks to the endpoint."""
