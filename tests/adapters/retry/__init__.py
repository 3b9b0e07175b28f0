"""Tests of polyloop.adapters.retry: the policy, the limiter, and retries against real servers."""
