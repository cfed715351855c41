"""`python -m llmdoctor`: the same as the `llmdoctor` command."""

from llmdoctor.cli import main

main()
