#pragma once

namespace cmdbus::db {

class connection;

/// A transaction on `conn`: BEGIN on construction, ROLLBACK on destruction
/// unless `commit()` succeeded.
class transaction {
public:
  explicit transaction(connection& conn);
  transaction(const transaction&) = delete;
  transaction& operator=(const transaction&) = delete;
  ~transaction();

  /// Commits; throws `error` if the server rejects the commit.
  void commit();

private:
  connection& conn_;
  bool done_ = false;
};

/// Rolls back the transaction open on `conn`, if any, after a failure; a
/// failing ROLLBACK is logged, never thrown, so that the original failure
/// propagates. A broken connection has nothing left to roll back.
void rollback_if_open(connection& conn) noexcept;

} // namespace cmdbus::db
