
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-pii/build-asan/migrations_embedded.c" "CMakeFiles/postbox_core.dir/migrations_embedded.c.o" "gcc" "CMakeFiles/postbox_core.dir/migrations_embedded.c.o.d"
  "/work/wt-pii/src/broker/amqp/conn.c" "CMakeFiles/postbox_core.dir/src/broker/amqp/conn.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/broker/amqp/conn.c.o.d"
  "/work/wt-pii/src/broker/amqp/url.c" "CMakeFiles/postbox_core.dir/src/broker/amqp/url.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/broker/amqp/url.c.o.d"
  "/work/wt-pii/src/broker/nats/conn.c" "CMakeFiles/postbox_core.dir/src/broker/nats/conn.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/broker/nats/conn.c.o.d"
  "/work/wt-pii/src/cdc/events.c" "CMakeFiles/postbox_core.dir/src/cdc/events.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/cdc/events.c.o.d"
  "/work/wt-pii/src/cdc/pgoutput.c" "CMakeFiles/postbox_core.dir/src/cdc/pgoutput.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/cdc/pgoutput.c.o.d"
  "/work/wt-pii/src/cdc/stream.c" "CMakeFiles/postbox_core.dir/src/cdc/stream.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/cdc/stream.c.o.d"
  "/work/wt-pii/src/common/backoff.c" "CMakeFiles/postbox_core.dir/src/common/backoff.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/common/backoff.c.o.d"
  "/work/wt-pii/src/common/clock.c" "CMakeFiles/postbox_core.dir/src/common/clock.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/common/clock.c.o.d"
  "/work/wt-pii/src/common/log.c" "CMakeFiles/postbox_core.dir/src/common/log.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/common/log.c.o.d"
  "/work/wt-pii/src/common/route.c" "CMakeFiles/postbox_core.dir/src/common/route.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/common/route.c.o.d"
  "/work/wt-pii/src/common/str.c" "CMakeFiles/postbox_core.dir/src/common/str.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/common/str.c.o.d"
  "/work/wt-pii/src/config/config.c" "CMakeFiles/postbox_core.dir/src/config/config.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/config/config.c.o.d"
  "/work/wt-pii/src/consume/consume.c" "CMakeFiles/postbox_core.dir/src/consume/consume.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/consume/consume.c.o.d"
  "/work/wt-pii/src/inbox/api.c" "CMakeFiles/postbox_core.dir/src/inbox/api.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/inbox/api.c.o.d"
  "/work/wt-pii/src/inbox/inbox.c" "CMakeFiles/postbox_core.dir/src/inbox/inbox.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/inbox/inbox.c.o.d"
  "/work/wt-pii/src/janitor/janitor.c" "CMakeFiles/postbox_core.dir/src/janitor/janitor.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/janitor/janitor.c.o.d"
  "/work/wt-pii/src/metrics/http.c" "CMakeFiles/postbox_core.dir/src/metrics/http.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/metrics/http.c.o.d"
  "/work/wt-pii/src/metrics/metrics.c" "CMakeFiles/postbox_core.dir/src/metrics/metrics.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/metrics/metrics.c.o.d"
  "/work/wt-pii/src/metrics/service.c" "CMakeFiles/postbox_core.dir/src/metrics/service.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/metrics/service.c.o.d"
  "/work/wt-pii/src/relay/capture_cdc.c" "CMakeFiles/postbox_core.dir/src/relay/capture_cdc.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/capture_cdc.c.o.d"
  "/work/wt-pii/src/relay/capture_poll.c" "CMakeFiles/postbox_core.dir/src/relay/capture_poll.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/capture_poll.c.o.d"
  "/work/wt-pii/src/relay/driver.c" "CMakeFiles/postbox_core.dir/src/relay/driver.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/driver.c.o.d"
  "/work/wt-pii/src/relay/holdback.c" "CMakeFiles/postbox_core.dir/src/relay/holdback.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/holdback.c.o.d"
  "/work/wt-pii/src/relay/mask.c" "CMakeFiles/postbox_core.dir/src/relay/mask.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/mask.c.o.d"
  "/work/wt-pii/src/relay/relay.c" "CMakeFiles/postbox_core.dir/src/relay/relay.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/relay.c.o.d"
  "/work/wt-pii/src/relay/shards.c" "CMakeFiles/postbox_core.dir/src/relay/shards.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/relay/shards.c.o.d"
  "/work/wt-pii/src/sink/amqp.c" "CMakeFiles/postbox_core.dir/src/sink/amqp.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/sink/amqp.c.o.d"
  "/work/wt-pii/src/sink/nats.c" "CMakeFiles/postbox_core.dir/src/sink/nats.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/sink/nats.c.o.d"
  "/work/wt-pii/src/sink/nats_ack.c" "CMakeFiles/postbox_core.dir/src/sink/nats_ack.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/sink/nats_ack.c.o.d"
  "/work/wt-pii/src/sink/sink.c" "CMakeFiles/postbox_core.dir/src/sink/sink.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/sink/sink.c.o.d"
  "/work/wt-pii/src/sink/stdout.c" "CMakeFiles/postbox_core.dir/src/sink/stdout.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/sink/stdout.c.o.d"
  "/work/wt-pii/src/source/amqp.c" "CMakeFiles/postbox_core.dir/src/source/amqp.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/source/amqp.c.o.d"
  "/work/wt-pii/src/source/amqp_headers.c" "CMakeFiles/postbox_core.dir/src/source/amqp_headers.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/source/amqp_headers.c.o.d"
  "/work/wt-pii/src/source/nats.c" "CMakeFiles/postbox_core.dir/src/source/nats.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/source/nats.c.o.d"
  "/work/wt-pii/src/source/source.c" "CMakeFiles/postbox_core.dir/src/source/source.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/source/source.c.o.d"
  "/work/wt-pii/src/store/dead_letters.c" "CMakeFiles/postbox_core.dir/src/store/dead_letters.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/dead_letters.c.o.d"
  "/work/wt-pii/src/store/migrate.c" "CMakeFiles/postbox_core.dir/src/store/migrate.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/migrate.c.o.d"
  "/work/wt-pii/src/store/outbox.c" "CMakeFiles/postbox_core.dir/src/store/outbox.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/outbox.c.o.d"
  "/work/wt-pii/src/store/pg.c" "CMakeFiles/postbox_core.dir/src/store/pg.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/pg.c.o.d"
  "/work/wt-pii/src/store/producer.c" "CMakeFiles/postbox_core.dir/src/store/producer.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/producer.c.o.d"
  "/work/wt-pii/src/store/purge.c" "CMakeFiles/postbox_core.dir/src/store/purge.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/purge.c.o.d"
  "/work/wt-pii/src/store/stats.c" "CMakeFiles/postbox_core.dir/src/store/stats.c.o" "gcc" "CMakeFiles/postbox_core.dir/src/store/stats.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
