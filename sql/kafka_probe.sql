--
-- kafka_probe: create_kafka_source and create_kafka_sink try their brokers
-- once; what cannot be reached or does not exist is a WARNING that says
-- which and why, and the source or sink is created anyway.
--
-- Environment: KAFKA_BOOTSTRAP (the broker).  The topics here have fixed
-- names (no KAFKA_RUN_ID): kp_fixed is made by producing to it, the others
-- are never created, by this test or by the probe (which lists the
-- cluster's topics instead of asking for one), so a rerun against a real
-- broker says the same.  Unreachable brokers: a name in the .invalid
-- domain, which never resolves (RFC 6761), and port 1 of the loopback.
--
\getenv bs KAFKA_BOOTSTRAP
\! printf 'x\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t kp_fixed -p 0

--
-- brokers: name resolution, refused connections, both
--
SELECT streaming.create_kafka_source('kp_badhost', 'kp-no-such-host.invalid:9092',
    topics => ARRAY['kp_fixed']);
SELECT streaming.create_kafka_source('kp_refused', '127.0.0.1:1', topics => ARRAY['kp_fixed']);
SELECT streaming.create_kafka_source('kp_both', 'kp-no-such-host.invalid:9092, PLAINTEXT://127.0.0.1:1',
    topics => ARRAY['kp_fixed']);
SELECT streaming.create_kafka_sink('kp_sink_refused', '127.0.0.1:1', 'kp_fixed');
-- credentials are used, never shown: the message has no password in it
SELECT streaming.create_kafka_source('kp_secret', '127.0.0.1:1', topics => ARRAY['kp_fixed'],
    kafka_options => '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                       "sasl.username": "kp_user", "sasl.password": "kp-secret-password"}');

--
-- topics: a reachable broker, and topics that exist or not
--
-- no warning: the topic exists
SELECT streaming.create_kafka_source('kp_ok', :'bs', topics => ARRAY['kp_fixed']);
SELECT streaming.create_kafka_sink('kp_sink_ok', :'bs', 'kp_fixed');
SELECT streaming.create_kafka_source('kp_missing', :'bs', topics => ARRAY['kp_never_created']);
SELECT streaming.create_kafka_source('kp_missing2', :'bs',
    topics => ARRAY['kp_fixed', 'kp_never_created', 'kp_never_created_either']);
SELECT streaming.create_kafka_sink('kp_sink_missing', :'bs', 'kp_never_created');
-- the probe did not create them
SELECT streaming.create_kafka_source('kp_missing_again', :'bs', topics => ARRAY['kp_never_created']);
-- patterns: matching a topic, or none
SELECT streaming.create_kafka_source('kp_pattern_ok', :'bs', topic_pattern => 'kp_fix.*');
SELECT streaming.create_kafka_source('kp_pattern_none', :'bs', topic_pattern => 'kp_never_.*');
-- partitions: of a missing topic, and beyond a topic's partitions
SELECT streaming.create_kafka_source('kp_parts_ok', :'bs', partitions => '{"kp_fixed": [0, 3]}');
SELECT streaming.create_kafka_source('kp_parts', :'bs',
    partitions => '{"kp_fixed": [0, 7, 9], "kp_never_created": [0]}');

-- every one of them was created
SELECT name, kind FROM streaming.sources WHERE name LIKE 'kp%' ORDER BY name;
SELECT name, kind FROM streaming.sinks WHERE name LIKE 'kp%' ORDER BY name;
-- a bad argument fails before anything is tried: an error, no warning
SELECT streaming.create_kafka_source('kp_bad', '127.0.0.1:1', topics => ARRAY['kp_fixed'],
    format => 'xml');
-- a name that is taken fails before too
SELECT streaming.create_kafka_source('kp_refused', '127.0.0.1:1', topics => ARRAY['kp_fixed']);

-- clean up
SELECT streaming.drop_source(name) FROM streaming.sources WHERE name LIKE 'kp%';
SELECT streaming.drop_kafka_sink(name) FROM streaming.sinks WHERE name LIKE 'kp%';
