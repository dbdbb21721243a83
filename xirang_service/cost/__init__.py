"""Cost governance: price book, metering, budgets, placement preferences, reports.

Money is integer micro-units (:mod:`~xirang_service.cost.money`); a
:class:`~xirang_service.cost.pricebook.PriceBook` prices device time by type, time window and
capacity class; the :class:`~xirang_service.cost.meter.Meter` turns pool allocations and training
runs into :class:`~xirang_service.cost.charges.Charge` records kept in the
:class:`~xirang_service.cost.store.CostStore`; budgets, findings and reports read that store. The
``cost=pricebook|offpeak|energy_aware`` policies (plugin ``xirang_pricebook``) quote from a price
book, ``cost=flat`` from one price per type.
"""
