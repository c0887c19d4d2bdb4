"""Adapter artifacts: inspection, validation and checksums (shared by plugin and control plane)."""
