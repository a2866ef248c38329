#include "relay/relay.h"

#include <string.h>

#include "check/check.h"
#include "metrics/service.h"
#include "relay/capture.h"
#include "relay/driver.h"
#include "relay/shadow_sink.h"
#include "sink/sink.h"

pb_status_t pb_relay_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                         volatile sig_atomic_t *stop, pb_error_t *err)
{
    pb_sink_t *snk = NULL;
    pb_capture_t *cap = NULL;
    pb_ops_t *ops = NULL; /* /metrics, /healthz, /readyz; backlog sampling and retention purge */
    bool cdc = strcmp(cfg->relay_capture, "cdc") == 0;
    pb_status_t st = pb_sink_new(cfg, &snk, err);
    if (st == PB_OK)
        st = pb_shadow_sink_wrap(cfg, &snk, err); /* relay.shadow: a second destination */
    if (st == PB_OK)
        st = !cdc ? pb_capture_poll_new(cfg, stop, &cap, err)
             : strcmp(cfg->cdc_on_excess_lag, "poll") == 0
                 ? pb_capture_fallback_new(cfg, stop, &cap, err) /* cdc, poll over the lag limit */
                 : pb_capture_cdc_new(cfg, stop, &cap, err);
    if (st != PB_OK && opts->config_error) /* the constructors only check the configuration */
        *opts->config_error = true;
    if (st == PB_OK) /* what `postbox check` finds in the database, as warnings */
        pb_check_at_start(cfg, PB_CHECK_RELAY, "relay");
    if (st == PB_OK)
        st = pb_ops_start(cfg, "relay", &ops, err);
    if (st == PB_OK)
        st = pb_driver_run(cfg, opts, stop, cap, snk, err);
    pb_ops_stop(ops);
    pb_capture_free(cap);
    pb_sink_free(snk);
    return st;
}
