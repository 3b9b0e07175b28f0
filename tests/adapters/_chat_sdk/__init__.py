"""Tests of the model clients over the openai SDK and LiteLLM, against real loopback servers."""
