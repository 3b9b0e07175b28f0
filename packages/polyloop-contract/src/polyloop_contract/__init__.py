"""polyloop-contract: a pytest plugin that checks implementations of PolyLoop's seams."""
