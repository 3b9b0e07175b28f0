"""Tests of polyloop.adapters.litellm_client."""
