namespace dtrain { int placeholder_worker = 0; }
