-- Every hour's energy graded for finance (issue 39; SPEC §4): how much of the IT energy came
-- from the cards' energy counters (measured) and how much was estimated from power_w.
--
-- v_rated_hours (0008) gains measured_mj, the rollup's grade (rated_hours.measured_mj, or for
-- the live hours the per-second rows' measured = 1), as its last column: the view is dropped
-- and made again, since a view's columns are fixed when it is created.
DROP VIEW IF EXISTS v_rated_hours;

CREATE VIEW IF NOT EXISTS v_rated_hours AS
SELECT period, tenant, hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct,
       band, tariff_per_kwh, pue, seconds, util_sum, energy_mj, measured_mj
FROM rated_hours
WHERE (period, hour, generation) IN (SELECT period, hour, max(generation) FROM rollup_runs GROUP BY period, hour)
  AND (period, hour) NOT IN (SELECT period, hour FROM v_live_hours)
UNION ALL
SELECT period, tenant, toStartOfHour(second) AS hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price,
       rent_per_s, discount_pct, band, tariff_per_kwh, pue, toUInt32(count()) AS seconds, sum(util_pct) AS util_sum,
       sum(rated_seconds.energy_mj) AS energy_mj, sumIf(rated_seconds.energy_mj, rated_seconds.measured = 1) AS measured_mj
FROM rated_seconds FINAL
WHERE (period, toStartOfHour(second)) IN (SELECT period, hour FROM v_live_hours)
GROUP BY period, tenant, hour, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct,
         band, tariff_per_kwh, pue;

-- Finance's graded energy per period, tenant ('' = unallocated), site and UTC hour: IT energy
-- (before PUE) in mJ, what the counters measured and what was estimated, and the measured
-- share (measured ÷ energy, rounded half up to six decimals; 0 for an hour without energy).
-- Hours written before counters (and rows rated without one) read as estimated.
CREATE VIEW IF NOT EXISTS v_energy_graded AS
SELECT period, tenant, site, hour, energy_mj, measured_mj, energy_mj - measured_mj AS estimated_mj,
       if(energy_mj = 0, toDecimal128(0, 6), toDecimal128(round(toDecimal128(measured_mj, 12) / energy_mj, 6), 6)) AS measured_share
FROM (SELECT period, tenant, site, hour, sum(energy_mj) AS energy_mj, sum(measured_mj) AS measured_mj
      FROM v_rated_hours WHERE stream = 'energy' GROUP BY period, tenant, site, hour);

-- v_rated_seconds (0003) was written `SELECT *`, expanded when it was created: made again with
-- its columns named, in the table's order, `measured` (1: the second's energy is its card
-- counter's rise) among them.
DROP VIEW IF EXISTS v_rated_seconds;

CREATE VIEW IF NOT EXISTS v_rated_seconds AS
SELECT stream, gpu_uuid, second, period, tenant, instance, gpu_model, site, node, plan, rent_price, rent_per_s,
       discount_pct, util_pct, energy_mj, band, tariff_per_kwh, pue, version, src_partition, src_offset, measured,
       rated_at
FROM rated_seconds FINAL;
