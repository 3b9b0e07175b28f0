"""Tests of polyloop.adapters.openai_client."""
