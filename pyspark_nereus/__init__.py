"""``format("nereus")`` in every Spark session, with no registration step.

Spark 4.1 looks, when a session first resolves a data source name, for top-level
modules named ``pyspark_*`` that define a ``DefaultSource`` data source class, and
registers each under its ``name()``. This module is that hook for Nereus.
"""

from nereus.lakehouse.spark import NereusDataSource as DefaultSource

__all__ = ["DefaultSource"]
