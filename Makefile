# streaming: Spark-Structured-Streaming-style stream processing in PostgreSQL.
EXTENSION   = streaming
EXTVERSION  = 0.4.0
MODULE_big  = streaming
OBJS        = $(patsubst %.c,%.o,$(wildcard src/*.c))
DATA        = sql/$(EXTENSION)--$(EXTVERSION).sql sql/$(EXTENSION)--0.1.0.sql \
              sql/$(EXTENSION)--0.1.0--0.2.0.sql sql/$(EXTENSION)--0.2.0--0.3.0.sql \
              sql/$(EXTENSION)--0.3.0--$(EXTVERSION).sql
PGFILEDESC  = "streaming - stream processing for PostgreSQL"

PG_CONFIG  ?= pg_config
PG_CPPFLAGS = -I$(srcdir)/src $(shell pkg-config --cflags rdkafka avro-c libcurl) \
              -DSTM_EXTVERSION='"$(EXTVERSION)"'
SHLIB_LINK  = $(shell pkg-config --libs rdkafka avro-c libcurl)

# make FAULT_INJECTION=1: a test build with fault points (src/fault.h);
# make test builds its own copy that way.
ifeq ($(FAULT_INJECTION),1)
PG_CPPFLAGS += -DSTM_FAULT_INJECTION
endif

# Tests (see README: "make test" runs them all on a private server).
REGRESS        = init kafka_source kafka_probe rate_source file_source file_streams api_errors stateless bad_records \
                 aggregates ext_aggregates sessions joins stream_joins null_groups kept_plans batch_memory watermarks idle_timeout security source_views \
                 kafka_sink avro cdc timestamp_fast_path parallel parallel_shapes upgrade_outbox upgrade_positions scaleout
REGRESS_OPTS   = --temp-instance=tmp_check --temp-config=test/streaming.conf \
                 --load-extension=$(EXTENSION)
ISOLATION      = concurrent_batches
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation/results \
                 --temp-instance=tmp_check_iso --temp-config=test/streaming.conf \
                 --load-extension=$(EXTENSION)
TAP_TESTS      = 1
PROVE_TESTS   ?= test/t/*.pl

EXTRA_CLEAN = test/mock_broker test/plugin_marker.so tmp_check tmp_check_iso test/isolation/results \
              test/isolation/output_iso results regression.diffs regression.out \
              tmp_install

# Without the PostgreSQL development files (a fresh machine), only demo and
# test work: they install what is missing (test/prereqs.sh), then build.
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
ifneq ($(wildcard $(shell $(PG_CONFIG) --includedir-server 2>/dev/null)/postgres.h),)
HAVE_PGXS = 1
endif
endif

ifdef HAVE_PGXS
include $(PGXS)

# PGXS does not track headers: rebuild every object when any header changes.
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h)
# The catalog version the library needs (src/catalog.c) is EXTVERSION.
src/catalog.o src/catalog.bc: Makefile

# The embedded Kafka broker for tests and the demo (librdkafka's mock cluster).
test/mock_broker: test/mock_broker.c
	$(CC) -O2 -Wall -o $@ $< $(shell pkg-config --cflags --libs rdkafka)

# A librdkafka plugin that leaves a marker file when loaded (test/t/009_security.pl).
test/plugin_marker.so: test/plugin_marker.c
	$(CC) -O2 -Wall -shared -fPIC -o $@ $< $(shell pkg-config --cflags rdkafka) -ldl

all: test/mock_broker test/plugin_marker.so
else
all:
	@echo "The PostgreSQL 15 development files are missing: run test/prereqs.sh (or make demo, make test), which installs them." >&2; exit 1
endif

# demo, test and start first install what is missing, then build in a new
# make (which sees what was just installed).
.PHONY: test demo bench start stop
test:
	test/prereqs.sh test
	$(MAKE) all
	test/run-tests.sh

demo:
	test/prereqs.sh demo
	$(MAKE) all
	test/demo.sh

# A cluster and a broker that stay up to try streams on (test/start.sh;
# the README's quick start): start prints how to connect, stop stops them.
start:
	@test/prereqs.sh demo
	@test/start.sh start

stop:
	@test/start.sh stop

bench: all
	bench/run.sh
