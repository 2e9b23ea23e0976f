"""Test support code that is not itself a test: the fake OpenAI upstream and shared builders.

Test modules import from here (and get fixtures from tests/conftest.py); they never import
each other.
"""
