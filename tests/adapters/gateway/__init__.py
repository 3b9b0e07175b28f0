"""Tests of polyloop.adapters.gateway against a real HTTP server on loopback."""
