"""Kafka topics over Pulsar topics and streams: the catalog, partitions and their producer state, the configs
in force, where brokers, leaders and coordinators are (routing), and storage errors as Kafka codes.
"""
