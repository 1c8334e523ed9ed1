"""The fan-out engine: durable publish jobs in MySQL, leased slot tasks, workers that page
recipients out of Cassandra and send them through the providers."""
