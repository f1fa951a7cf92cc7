# Source this file to run PySpark jobs (and the Spark tests) against this checkout:
#
#     . scripts/spark_env.sh
#     .venv/bin/pytest tests/integration/test_spark.py
#
# Spark's Python workers must use the interpreter that has txn_engine and pylance
# installed; the driver binds to loopback in local mode.
_txn_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$_txn_root/.venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PYSPARK_PYTHON}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
if [ -z "${JAVA_HOME:-}" ] && command -v java >/dev/null 2>&1; then
    JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
    export JAVA_HOME
fi
unset _txn_root
