"""The contract suites, one module per seam. Collected only under ``--polyloop-contract``."""
