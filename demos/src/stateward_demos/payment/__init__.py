"""The Payment SDK migration research scenario: fixtures, research tools and the v1/v2 assessment reports."""
