"""Built-in checks of the llmdoctor checklist, one module per check (shipped as llmdoctor.checks)."""
